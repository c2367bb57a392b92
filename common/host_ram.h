/* host_ram.h - this machine's physical memory, as the kernel reports it now. */
#ifndef SG_HOST_RAM_H
#define SG_HOST_RAM_H

/* Bytes of RAM (sysconf's physical pages times the page size); 0 when the
 * system does not say. */
double sg_host_ram_bytes(void);

#endif
