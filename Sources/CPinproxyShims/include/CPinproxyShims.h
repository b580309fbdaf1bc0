// Functions for the OpenSSL and libevent macros Swift cannot call.
// Each shim exists only because the C name is a macro or a variadic function;
// it adds no behaviour. All symbols carry the `pp_` prefix.
#ifndef CPINPROXY_SHIMS_H
#define CPINPROXY_SHIMS_H

#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/ocsp.h>
#include <openssl/ct.h>
#include <sys/socket.h>
// The kernel's socket diagnostics (NETLINK_SOCK_DIAG): Swift's Glibc module does not carry
// these headers, so they come in here for their structs and constants only.
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/inet_diag.h>
#include <sys/types.h>
// mallopt(3) and its M_* settings: Swift's Glibc module does not carry <malloc.h>.
#include <malloc.h>

// STACK_OF(X509): the sk_X509_* accessors are macros.
STACK_OF(X509) *pp_sk_X509_new_null(void);
int pp_sk_X509_push(STACK_OF(X509) *stack, X509 *cert);
int pp_sk_X509_num(const STACK_OF(X509) *stack);
X509 *pp_sk_X509_value(const STACK_OF(X509) *stack, int index);
void pp_sk_X509_free(STACK_OF(X509) *stack);
void pp_sk_X509_pop_free(STACK_OF(X509) *stack);

// STACK_OF(X509_CRL).
STACK_OF(X509_CRL) *pp_sk_X509_CRL_new_null(void);
int pp_sk_X509_CRL_push(STACK_OF(X509_CRL) *stack, X509_CRL *crl);
void pp_sk_X509_CRL_free(STACK_OF(X509_CRL) *stack);

// subjectAltName entries, for display.
int pp_sk_GENERAL_NAME_num(const GENERAL_NAMES *names);
GENERAL_NAME *pp_sk_GENERAL_NAME_value(const GENERAL_NAMES *names, int index);
void pp_GENERAL_NAMES_free(GENERAL_NAMES *names);

// X509_STORE_CTX application data (a macro over ex_data index 0).
int pp_X509_STORE_CTX_set_app_data(X509_STORE_CTX *ctx, void *data);
void *pp_X509_STORE_CTX_get_app_data(X509_STORE_CTX *ctx);

// SSL and SSL_CTX controls that are macros over SSL_ctrl / SSL_CTX_ctrl.
long pp_SSL_set_tlsext_host_name(SSL *ssl, const char *name);
long pp_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version);
long pp_SSL_set_min_proto_version(SSL *ssl, int version);
long pp_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version);
long pp_SSL_set_tlsext_status_type_ocsp(SSL *ssl);
long pp_SSL_get_tlsext_status_ocsp_resp(SSL *ssl, const unsigned char **resp);
long pp_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode);
int pp_SSL_set_app_data(SSL *ssl, void *data);
void *pp_SSL_get_app_data(const SSL *ssl);

// STACK_OF(SCT): the sk_SCT_* accessors are macros.
int pp_sk_SCT_num(const STACK_OF(SCT) *stack);
SCT *pp_sk_SCT_value(const STACK_OF(SCT) *stack, int index);
// Asks for the SCT TLS extension (and an OCSP staple) on `ssl`, with a validation callback that
// accepts whatever comes: pinproxy judges the SCTs itself, after the handshake.
int pp_SSL_request_scts(SSL *ssl);
// memfd_create(name, MFD_CLOEXEC): glibc declares it only under _GNU_SOURCE.
int pp_memfd_create_cloexec(const char *name);

// BIO_get_mem_data is a macro.
long pp_BIO_get_mem_data(BIO *bio, char **data);

// XN_FLAG_RFC2253 is a composite macro; this returns it without escaping UTF-8 bytes.
unsigned long pp_name_print_flags(void);

// OPENSSL_free is a macro.
void pp_OPENSSL_free(void *pointer);

// EVP_EC_gen is a macro over a variadic function.
EVP_PKEY *pp_EVP_EC_gen_p256(void);

// ERR_GET_REASON is an inline function over a macro mask.
int pp_ERR_GET_REASON(unsigned long error);

// SSL_CTX_set_tlsext_servername_callback is a macro over SSL_CTX_callback_ctrl.
void pp_SSL_CTX_set_tlsext_servername_callback(SSL_CTX *ctx, int (*callback)(SSL *, int *, void *));

// SSL_CTX_sess_set_new_cb with a Swift-provided callback (a plain function pointer).
void pp_SSL_CTX_sess_set_new_cb(SSL_CTX *ctx, int (*callback)(SSL *, SSL_SESSION *));

// SSL_OP_* option bits are built with the SSL_OP_BIT() macro, which Swift does not import.
uint64_t pp_SSL_OP_NO_RENEGOTIATION(void);
uint64_t pp_SSL_OP_CIPHER_SERVER_PREFERENCE(void);

// pidfd_open(2) has only the variadic syscall() in this glibc's headers: -1 with errno ENOSYS
// where the headers do not know it.
int pp_pidfd_open(pid_t pid);
// SO_ORIGINAL_DST (SOL_IP) and IP6T_SO_ORIGINAL_DST (SOL_IPV6) are macros of the kernel's
// netfilter headers, which Swift's Glibc module does not include.
int pp_SO_ORIGINAL_DST(void);
int pp_IP6T_SO_ORIGINAL_DST(void);
// Names the calling thread (prctl(PR_SET_NAME), variadic in C): the kernel keeps 15 bytes.
void pp_set_thread_name(const char *name);


// Removes one capability from the calling thread's effective, permitted, inheritable and ambient
// sets (capset(2) and PR_CAP_AMBIENT have no glibc wrapper without libcap): 0, or -1 and errno.
int pp_drop_capability(int capability);

#endif
