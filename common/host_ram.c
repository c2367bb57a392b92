/* host_ram.c - this machine's physical memory (host_ram.h). */
#define _POSIX_C_SOURCE 200809L
#include "common/host_ram.h"

#include <unistd.h>

double sg_host_ram_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0.0;
}
