/* warnings.h - a bounded list of warnings that loaders collect (unknown but
 * harmless config keys, tensors a weights file has in excess) for the
 * command to print. Appended with sg_config_warnings_add (json_util.h). */
#ifndef SG_WARNINGS_H
#define SG_WARNINGS_H

#define SG_MAX_WARNINGS 64

typedef struct sg_config_warnings {
    int count;
    char msg[SG_MAX_WARNINGS][256];
} sg_config_warnings;

#endif /* SG_WARNINGS_H */
