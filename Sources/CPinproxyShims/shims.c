#include "CPinproxyShims.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

int pp_is_protocol_version_error(unsigned long error) {
    switch (ERR_GET_REASON(error)) {
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
    case SSL_R_NO_PROTOCOLS_AVAILABLE:
    case SSL_R_WRONG_SSL_VERSION:
    case SSL_R_VERSION_TOO_LOW:
        return 1;
    default:
        return 0;
    }
}

static int pp_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                          const unsigned char *in, unsigned int inlen, void *arg) {
    (void)ssl; (void)arg;
    static const unsigned char http11[] = { 8, 'h', 't', 't', 'p', '/', '1', '.', '1' };
    unsigned char *selected = NULL;
    if (SSL_select_next_proto(&selected, outlen, http11, sizeof(http11), in, inlen) == OPENSSL_NPN_NEGOTIATED) {
        *out = selected;
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_NOACK;
}

void pp_SSL_CTX_select_alpn_http11(SSL_CTX *ctx) { SSL_CTX_set_alpn_select_cb(ctx, pp_alpn_select, NULL); }

void pp_SSL_CTX_sess_set_new_cb(SSL_CTX *ctx, int (*callback)(SSL *, SSL_SESSION *)) { SSL_CTX_sess_set_new_cb(ctx, callback); }

void pp_SSL_CTX_prefer_server_ciphers(SSL_CTX *ctx) { SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE); }

static int pp_server_name_index = -1;

static void pp_free_server_name(void *parent, void *pointer, CRYPTO_EX_DATA *data, int index, long argl, void *argp) {
    (void)parent; (void)data; (void)index; (void)argl; (void)argp;
    free(pointer);
}

static int pp_require_server_name(SSL *ssl, int *alert, void *arg) {
    (void)arg;
    const char *expected = SSL_get_ex_data(ssl, pp_server_name_index);
    const char *sent = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (expected == NULL || sent == NULL) return SSL_TLSEXT_ERR_OK;
    size_t length = strlen(sent);
    if (length > 0 && sent[length - 1] == '.') length--;
    if (length == strlen(expected) && strncasecmp(sent, expected, length) == 0) return SSL_TLSEXT_ERR_OK;
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

void pp_SSL_CTX_require_server_name(SSL_CTX *ctx) {
    if (pp_server_name_index < 0) pp_server_name_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, pp_free_server_name);
    SSL_CTX_set_tlsext_servername_callback(ctx, pp_require_server_name);
}

int pp_SSL_expect_server_name(SSL *ssl, const char *name) {
    char *copy = strdup(name);
    if (copy == NULL) return 0;
    if (SSL_set_ex_data(ssl, pp_server_name_index, copy) != 1) {
        free(copy);
        return 0;
    }
    return 1;
}
