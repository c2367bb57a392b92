/* starpu_include.h - <starpu.h> for files built against both StarPU
 * flavours. SimGrid's headers (pulled in by the SimGrid flavour) declare an
 * enumerator SG_OK of their own, which clashes with common/error.h's: it is
 * renamed while they are read. */
#ifndef SG_STARPU_INCLUDE_H
#define SG_STARPU_INCLUDE_H

#define SG_OK SG_OK_simgrid
#include <starpu.h>
#include <starpu_profiling.h>
#undef SG_OK

#endif /* SG_STARPU_INCLUDE_H */
