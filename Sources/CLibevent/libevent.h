// System headers first: event2/event-config.h defines _GNU_SOURCE, which would
// otherwise give this module a different fd_set than Glibc and Dispatch see.
#include <sys/types.h>
#include <sys/select.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netdb.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include <event2/event.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/listener.h>
#include <event2/dns.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <event2/util.h>
