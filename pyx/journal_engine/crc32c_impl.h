/* CRC32C (Castagnoli), the checksum of every journal frame and file header.
 *
 * Hardware path: SSE4.2's crc32 instruction, three independent lanes over
 * large inputs so the 3-cycle latency of the instruction is hidden; lanes are
 * joined with a table-free shift (multiplication by x^(8*len) mod P).
 * Software path: slicing-by-8 tables, used when the CPU lacks SSE4.2.
 * Both give identical results; tests compare them with the Python twin.
 */
#ifndef JOURNAL_ENGINE_CRC32C_IMPL_H
#define JOURNAL_ENGINE_CRC32C_IMPL_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#define JE_CRC32C_POLY 0x82F63B78u

static uint32_t je_crc_table[8][256];
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static void je_small_tables(void);
#endif
static int je_crc_ready = 0;
static int je_crc_hw = 0;

__attribute__((unused)) static void je_crc32c_init(void) {
    if (je_crc_ready) return;
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ JE_CRC32C_POLY : c >> 1;
        je_crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = je_crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = je_crc_table[0][c & 0xff] ^ (c >> 8);
            je_crc_table[t][n] = c;
        }
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    je_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    if (je_crc_hw) je_small_tables();
#endif
    je_crc_ready = 1;
}

static uint32_t je_crc32c_sw(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) { crc = je_crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8); n--; }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = je_crc_table[7][w & 0xff] ^ je_crc_table[6][(w >> 8) & 0xff] ^
              je_crc_table[5][(w >> 16) & 0xff] ^ je_crc_table[4][(w >> 24) & 0xff] ^
              je_crc_table[3][(w >> 32) & 0xff] ^ je_crc_table[2][(w >> 40) & 0xff] ^
              je_crc_table[1][(w >> 48) & 0xff] ^ je_crc_table[0][w >> 56];
        p += 8; n -= 8;
    }
    while (n--) crc = je_crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* multiply a and b modulo P (bit-reflected), used to shift a lane's crc */
static uint32_t je_gf_mul(uint32_t a, uint32_t b) {
    uint32_t prod = 0;
    for (int i = 0; i < 32; i++) {
        if (b & 0x80000000u) prod ^= a;
        b <<= 1;
        a = (a & 1) ? (a >> 1) ^ JE_CRC32C_POLY : a >> 1;
    }
    return prod;
}

/* x^(8*n) mod P in reflected form: the factor that appends n zero bytes */
static uint32_t je_shift_factor(size_t n) {
    uint32_t result = 0x80000000u; /* x^0 */
    uint32_t power = 0x00800000u;  /* x^8 */
    while (n) {
        if (n & 1) result = je_gf_mul(result, power);
        power = je_gf_mul(power, power);
        n >>= 1;
    }
    return result;
}

#define JE_LANE_BYTES 4096
static uint32_t je_lane_shift = 0;

/* Frames are a few hundred bytes: three 64-byte lanes hide the instruction's latency there
 * too. Joining lanes multiplies by x^(8*64) and x^(8*128); being linear in the crc, each
 * multiplication is four table lookups (tables built once from je_gf_mul). */
#define JE_SMALL_LANE_BYTES 64
static uint32_t je_shift_small1[4][256];
static uint32_t je_shift_small2[4][256];
static int je_small_ready = 0;

static void je_small_tables(void) {
    uint32_t k1 = je_shift_factor(JE_SMALL_LANE_BYTES), k2 = je_shift_factor(2 * JE_SMALL_LANE_BYTES);
    for (int i = 0; i < 4; i++)
        for (uint32_t b = 0; b < 256; b++) {
            je_shift_small1[i][b] = je_gf_mul(b << (8 * i), k1);
            je_shift_small2[i][b] = je_gf_mul(b << (8 * i), k2);
        }
    je_small_ready = 1;
}

static inline uint32_t je_shift_by_table(uint32_t t[4][256], uint32_t c) {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

/* One pass over three adjacent lanes of `lane` bytes at p, their crc32 instructions interleaved:
 * *c0 carries the running crc through the first lane, *c1 and *c2 start from 0 in the second and
 * third (the caller joins them). Always inlined: `lane` is a constant at each call, so each pass
 * compiles to the loop it was written as. */
__attribute__((target("sse4.2"), always_inline))
static inline void je_crc_three_lanes(const unsigned char *p, size_t lane, uint64_t *c0, uint64_t *c1,
                                      uint64_t *c2) {
    const unsigned char *p1 = p + lane, *p2 = p + 2 * lane;
    uint64_t a = *c0, b = 0, c = 0;
    for (size_t i = 0; i < lane; i += 8) {
        uint64_t w0, w1, w2;
        memcpy(&w0, p + i, 8); memcpy(&w1, p1 + i, 8); memcpy(&w2, p2 + i, 8);
        a = __builtin_ia32_crc32di(a, w0);
        b = __builtin_ia32_crc32di(b, w1);
        c = __builtin_ia32_crc32di(c, w2);
    }
    *c0 = a; *c1 = b; *c2 = c;
}

__attribute__((target("sse4.2")))
static uint32_t je_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c0 = (uint32_t)~crc, c1, c2;
    while (n && ((uintptr_t)p & 7)) { c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++); n--; }
    if (n >= 3 * JE_LANE_BYTES) {
        if (!je_lane_shift) je_lane_shift = je_shift_factor(JE_LANE_BYTES);
        while (n >= 3 * JE_LANE_BYTES) {
            je_crc_three_lanes(p, JE_LANE_BYTES, &c0, &c1, &c2);
            c0 = je_gf_mul((uint32_t)c0, je_lane_shift) ^ c1;
            c0 = je_gf_mul((uint32_t)c0, je_lane_shift) ^ c2;
            p += 3 * JE_LANE_BYTES; n -= 3 * JE_LANE_BYTES;
        }
    }
    if (n >= 3 * JE_SMALL_LANE_BYTES && je_small_ready) {
        while (n >= 3 * JE_SMALL_LANE_BYTES) {
            je_crc_three_lanes(p, JE_SMALL_LANE_BYTES, &c0, &c1, &c2);
            c0 = je_shift_by_table(je_shift_small2, (uint32_t)c0) ^ je_shift_by_table(je_shift_small1, (uint32_t)c1)
                 ^ (uint32_t)c2;
            p += 3 * JE_SMALL_LANE_BYTES; n -= 3 * JE_SMALL_LANE_BYTES;
        }
    }
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); c0 = __builtin_ia32_crc32di(c0, w); p += 8; n -= 8; }
    while (n--) c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}
#endif

/* crc32c(previous_crc, data): previous_crc 0 starts a new checksum */
__attribute__((unused)) static uint32_t je_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (je_crc_hw) return je_crc32c_hw(crc, p, n);
#endif
    return je_crc32c_sw(crc, p, n);
}

__attribute__((unused)) static uint32_t je_crc32c_software(uint32_t crc, const unsigned char *p, size_t n) {
    return je_crc32c_sw(crc, p, n);
}

__attribute__((unused)) static int je_crc32c_uses_hardware(void) { return je_crc_hw; }

#endif
