#include "CPinproxyShims.h"
#include <netinet/in.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>

#include <errno.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

STACK_OF(X509) *pp_sk_X509_new_null(void) { return sk_X509_new_null(); }
int pp_sk_X509_push(STACK_OF(X509) *stack, X509 *cert) { return sk_X509_push(stack, cert); }
int pp_sk_X509_num(const STACK_OF(X509) *stack) { return sk_X509_num(stack); }
X509 *pp_sk_X509_value(const STACK_OF(X509) *stack, int index) { return sk_X509_value(stack, index); }
void pp_sk_X509_free(STACK_OF(X509) *stack) { sk_X509_free(stack); }
void pp_sk_X509_pop_free(STACK_OF(X509) *stack) { sk_X509_pop_free(stack, X509_free); }

STACK_OF(X509_CRL) *pp_sk_X509_CRL_new_null(void) { return sk_X509_CRL_new_null(); }
int pp_sk_X509_CRL_push(STACK_OF(X509_CRL) *stack, X509_CRL *crl) { return sk_X509_CRL_push(stack, crl); }
void pp_sk_X509_CRL_free(STACK_OF(X509_CRL) *stack) { sk_X509_CRL_free(stack); }

int pp_sk_GENERAL_NAME_num(const GENERAL_NAMES *names) { return sk_GENERAL_NAME_num(names); }
GENERAL_NAME *pp_sk_GENERAL_NAME_value(const GENERAL_NAMES *names, int index) { return sk_GENERAL_NAME_value(names, index); }
void pp_GENERAL_NAMES_free(GENERAL_NAMES *names) { GENERAL_NAMES_free(names); }

int pp_X509_STORE_CTX_set_app_data(X509_STORE_CTX *ctx, void *data) { return X509_STORE_CTX_set_app_data(ctx, data); }
void *pp_X509_STORE_CTX_get_app_data(X509_STORE_CTX *ctx) { return X509_STORE_CTX_get_app_data(ctx); }

long pp_SSL_set_tlsext_host_name(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
long pp_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) { return SSL_CTX_set_min_proto_version(ctx, version); }
long pp_SSL_set_min_proto_version(SSL *ssl, int version) { return SSL_set_min_proto_version(ssl, version); }
long pp_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version) { return SSL_CTX_set_max_proto_version(ctx, version); }
long pp_SSL_set_tlsext_status_type_ocsp(SSL *ssl) { return SSL_set_tlsext_status_type(ssl, TLSEXT_STATUSTYPE_ocsp); }
long pp_SSL_get_tlsext_status_ocsp_resp(SSL *ssl, const unsigned char **resp) {
    return SSL_get_tlsext_status_ocsp_resp(ssl, resp);
}
long pp_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_session_cache_mode(ctx, mode); }
int pp_SSL_set_app_data(SSL *ssl, void *data) { return SSL_set_app_data(ssl, data); }
void *pp_SSL_get_app_data(const SSL *ssl) { return SSL_get_app_data(ssl); }

long pp_BIO_get_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }

unsigned long pp_name_print_flags(void) { return XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB; }

void pp_OPENSSL_free(void *pointer) { OPENSSL_free(pointer); }

EVP_PKEY *pp_EVP_EC_gen_p256(void) { return EVP_EC_gen("P-256"); }

int pp_ERR_GET_REASON(unsigned long error) { return ERR_GET_REASON(error); }

void pp_SSL_CTX_set_tlsext_servername_callback(SSL_CTX *ctx, int (*callback)(SSL *, int *, void *)) {
    SSL_CTX_set_tlsext_servername_callback(ctx, callback);
}

void pp_SSL_CTX_sess_set_new_cb(SSL_CTX *ctx, int (*callback)(SSL *, SSL_SESSION *)) { SSL_CTX_sess_set_new_cb(ctx, callback); }

uint64_t pp_SSL_OP_NO_RENEGOTIATION(void) { return SSL_OP_NO_RENEGOTIATION; }
uint64_t pp_SSL_OP_CIPHER_SERVER_PREFERENCE(void) { return SSL_OP_CIPHER_SERVER_PREFERENCE; }

int pp_pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

int pp_SO_ORIGINAL_DST(void) { return SO_ORIGINAL_DST; }
int pp_IP6T_SO_ORIGINAL_DST(void) { return IP6T_SO_ORIGINAL_DST; }
void pp_set_thread_name(const char *name) { (void)prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0); }

int pp_sk_SCT_num(const STACK_OF(SCT) *stack) { return sk_SCT_num(stack); }
SCT *pp_sk_SCT_value(const STACK_OF(SCT) *stack, int index) { return sk_SCT_value(stack, index); }

static int pp_accept_scts(const CT_POLICY_EVAL_CTX *ctx, const STACK_OF(SCT) *scts, void *arg) {
    (void)ctx; (void)scts; (void)arg;
    return 1;
}

int pp_SSL_request_scts(SSL *ssl) { return SSL_set_ct_validation_callback(ssl, pp_accept_scts, NULL); }

int pp_memfd_create_cloexec(const char *name) { return (int)syscall(SYS_memfd_create, name, 1U /* MFD_CLOEXEC */); }

int pp_drop_capability(int capability) {
    struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &header, data) != 0) return -1;
    unsigned index = (unsigned)capability / 32, bit = 1u << ((unsigned)capability % 32);
    // Lowered from the ambient set first (EINVAL: a kernel without ambient capabilities).
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, capability, 0, 0) != 0 && errno != EINVAL) return -1;
    data[index].effective &= ~bit;
    data[index].permitted &= ~bit;
    data[index].inheritable &= ~bit;
    return (int)syscall(SYS_capset, &header, data);
}
