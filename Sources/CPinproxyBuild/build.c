#include "CPinproxyBuild.h"

#ifndef PINPROXY_COMMIT
#define PINPROXY_COMMIT ""
#endif
#ifndef PINPROXY_COMMIT_DATE
#define PINPROXY_COMMIT_DATE ""
#endif

const char *pp_build_commit(void) { return PINPROXY_COMMIT; }
const char *pp_build_commit_date(void) { return PINPROXY_COMMIT_DATE; }
