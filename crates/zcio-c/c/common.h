/* What the C examples share: the byte pattern of message k, and a check that says which call
 * failed with which status and message. */
#ifndef ZCIO_EXAMPLE_COMMON_H
#define ZCIO_EXAMPLE_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zcio.h>

/* Byte i of message k: differs from message to message and from page to page, so that a
 * byte of the wrong message or the wrong page is caught. */
static inline uint8_t pattern_byte(uint64_t k, size_t i) {
    return (uint8_t)((i * 131u) ^ (i >> 12) ^ (k * 29u + 7u));
}

static inline void fill_pattern(uint8_t *buf, size_t len, uint64_t k) {
    for (size_t i = 0; i < len; i++) buf[i] = pattern_byte(k, i);
}

/* The first byte of `buf` that is not message k's, or `len` where all are. */
static inline size_t check_pattern(const uint8_t *buf, size_t len, uint64_t k) {
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pattern_byte(k, i)) return i;
    return len;
}

/* Fail the program where `call` did not return ZCIO_OK, with zcio's whole message. */
#define CHECK(call)                                                                       \
    do {                                                                                  \
        zcio_status check_s_ = (call);                                                    \
        if (check_s_ != ZCIO_OK) {                                                        \
            char check_m_[1024];                                                          \
            zcio_last_error(check_m_, sizeof check_m_, NULL);                             \
            fprintf(stderr, "%s:%d: %s: %s\n  %s\n", __FILE__, __LINE__, #call,           \
                    zcio_status_string(check_s_), check_m_);                              \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static inline double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A size with an optional suffix: 64k, 1m, 64m. */
static inline size_t parse_size(const char *s) {
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
    if (*end == 'k' || *end == 'K') n <<= 10;
    else if (*end == 'm' || *end == 'M') n <<= 20;
    return (size_t)n;
}

#endif
