/* starpu_info.h - what StarPU this binary was built against. */
#ifndef SG_STARPU_INFO_H
#define SG_STARPU_INFO_H

#include <stddef.h>

/* "1.4.10" (from the library actually loaded). */
void sg_starpu_version(char *buf, size_t size);

/* One line on the GPU side of this build: whether the CUDA codelets are in
 * it, NCCL, and how many CUDA devices are visible now. */
void sg_starpu_cuda_info(char *buf, size_t size);

/* The CUDA devices this build can use now (0 without CUDA). */
int sg_starpu_cuda_devices(void);

#endif
