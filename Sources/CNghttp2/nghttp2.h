#include <sys/types.h>
#include <stdint.h>
#include <nghttp2/nghttp2.h>
