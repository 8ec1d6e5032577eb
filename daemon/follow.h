/* Following a job's output and the event log (JobLogs/EventsRequest with
 * follow): placeholder until the streaming work lands. */
#ifndef CORRAL_DAEMON_FOLLOW_H
#define CORRAL_DAEMON_FOLLOW_H
#include "net/net.h"
void follow_add(cr_conn_t *c, uint64_t req, const char *job_id, int worker_index, uint64_t offset);
void follow_events_add(cr_conn_t *c, uint64_t req, uint64_t since_seq);
void follow_poke(void);
void follow_event_appended(void);
void follow_conn_closed(cr_conn_t *c);
void follow_fini(void);
#endif
