/* starpu_info.h - what StarPU this binary was built against. */
#ifndef SG_STARPU_INFO_H
#define SG_STARPU_INFO_H

#include <stddef.h>

/* "1.4.10" (from the library actually loaded). */
void sg_starpu_version(char *buf, size_t size);

#endif
