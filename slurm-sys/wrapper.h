/*
 * slurm-sys/wrapper.h: everything allot's slurmctld plugins touch in Slurm,
 * for every release it builds for (22.05, 24.11 to 26.05). bindgen reads this file
 * (build.rs), and so does the C layout probe that tests/layout.rs compares
 * the Rust bindings against.
 *
 * Public headers (<slurm/...>) resolve to that release's libslurm-dev
 * copies or the configured tree's; the internal ones ("src/...") to its
 * source tree (SLURM_SRC_DIR).
 * A configured tree brings its own config.h; for an unconfigured one,
 * build.rs supplies an empty config.h: the structs used here do not depend
 * on anything ./configure decides, and Debian builds with --disable-debug,
 * hence -DNDEBUG (see build.rs).
 */
#include <slurm/slurm_version.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include "src/common/list.h"            /* List / list_t, list_* */
#include "src/common/log.h"             /* log_var, error, slurm_info, get_log_level */
#include "src/common/xmalloc.h"         /* slurm_xcalloc, slurm_xfree */
#include "src/common/xstring.h"
#include "src/common/run_in_daemon.h"   /* running_in_slurmctld */
#include "src/common/node_conf.h"       /* node_record_t, node_record_table_ptr */
#include "src/common/read_config.h"     /* slurm_conf */
#include "src/common/slurm_protocol_defs.h" /* slurm_destroy_priority_factors* */

/* The plugin interfaces live in src/interfaces in 24.11, in src/common and
 * src/slurmctld in 22.05 (they moved in between: check the tree of any
 * release added here). */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
#include "src/interfaces/gres.h"        /* gres_state_t, gres_job_state_t */
#include "src/interfaces/priority.h"
#include "src/interfaces/preempt.h"     /* slurm_preempt_data_type_t */
#else
#include "src/common/gres.h"
#include "src/common/slurm_priority.h"
#include "src/slurmctld/preempt.h"
#endif

#include "src/slurmctld/slurmctld.h"    /* job_record_t, part_record_t, job_list */
#include "src/slurmctld/locks.h"        /* slurmctld_lock_t, lock_slurmctld */
#include "src/slurmctld/job_scheduler.h" /* job_queue_rec_t, queue_job_scheduler */

/*
 * 22.05's slurmctld.h only ever says `struct job_details`; a typedef gives it
 * the same *_t spelling as its siblings in the bindings (24.11's
 * src/common/job_record.h has its own).
 */
#if SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(24, 11, 0)
typedef struct job_details job_details_t;
#endif

/*
 * Aliases libslurmfull exports (see src/common/slurm_xlator.h) that no header
 * declares without that translation header. xstring.h declares xstrdup(),
 * which is exported too, but slurm_xstrdup is the name Slurm's own plugins
 * end up calling, so it is the one least likely to disappear.
 */
extern char *slurm_xstrdup(const char *str);

/* bit_test() is spelled slurm_bit_test in libslurmfull (slurm_xlator.h). */
extern int slurm_bit_test(bitstr_t *b, bitoff_t bit);
/* bit_ffs() and bit_fls(), likewise: a job's first and last node. */
extern bitoff_t slurm_bit_ffs(bitstr_t *b);
extern bitoff_t slurm_bit_fls(bitstr_t *b);
