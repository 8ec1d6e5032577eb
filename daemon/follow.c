#include "daemon/follow.h"
void follow_add(cr_conn_t *c, uint64_t req, const char *job_id, int worker_index, uint64_t offset)
{
    cr_conn_reply_error(c, req, CR_ENOSYS, "following logs is not supported yet");
}
void follow_events_add(cr_conn_t *c, uint64_t req, uint64_t since_seq)
{
    cr_conn_reply_error(c, req, CR_ENOSYS, "following events is not supported yet");
}
void follow_poke(void) {}
void follow_event_appended(void) {}
void follow_conn_closed(cr_conn_t *c) {}
void follow_fini(void) {}
