/* CRC-32C (Castagnoli) for the compiled kernels.
 *
 * x86-64 with SSE 4.2: the crc32 instruction, 8 bytes a step, three interleaved streams (the
 * instruction has a latency of 3 cycles and a throughput of 1) whose CRCs are combined by
 * "shifting" a CRC past the bytes that follow it: a linear map over GF(2) applied with four
 * table lookups (zlib's crc32_combine method). The function carries a target attribute, so the
 * module builds for generic x86-64 and the instruction runs only where CPU detection (cpuid, at
 * the first call) found it. Everywhere else: a slicing-by-8 table walk.
 *
 * All functions are static: each extension that includes this header gets its own copy.
 * -DKSDS_PORTABLE_ONLY builds the table walk alone (what non-x86 targets such as aarch64 get).
 */
#ifndef KSDS_CRC32C_H
#define KSDS_CRC32C_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(KSDS_PORTABLE_ONLY)
#define KSDS_X86 1
#include <nmmintrin.h>
#else
#define KSDS_X86 0
#endif

#define KSDS_POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define KSDS_LONG_BLOCK 2048
#define KSDS_SHORT_BLOCK 256

static uint32_t ksds_table[8][256];
static uint32_t ksds_long_shift[4][256];
static uint32_t ksds_short_shift[4][256];
static int ksds_ready = 0;
static int ksds_hardware = 0;

static uint32_t ksds_gf2_times(const uint32_t *matrix, uint32_t vector) {
    uint32_t total = 0;
    int row = 0;
    while (vector) {
        if (vector & 1u) total ^= matrix[row];
        vector >>= 1;
        row++;
    }
    return total;
}

/* out = outer o inner (out may not alias either) */
static void ksds_gf2_compose(const uint32_t *outer, const uint32_t *inner, uint32_t *out) {
    for (int k = 0; k < 32; k++) out[k] = ksds_gf2_times(outer, inner[k]);
}

/* Tables that move a CRC past `length` zero bytes (reflected domain). */
static void ksds_shift_tables(size_t length, uint32_t table[4][256]) {
    uint32_t op[32], result[32], tmp[32];
    op[0] = KSDS_POLY; /* one zero bit */
    for (int row = 1; row < 32; row++) op[row] = 1u << (row - 1);
    for (int i = 0; i < 3; i++) { /* one zero byte */
        ksds_gf2_compose(op, op, tmp);
        memcpy(op, tmp, sizeof op);
    }
    for (int row = 0; row < 32; row++) result[row] = 1u << row;
    while (length) {
        if (length & 1u) {
            ksds_gf2_compose(op, result, tmp);
            memcpy(result, tmp, sizeof result);
        }
        ksds_gf2_compose(op, op, tmp);
        memcpy(op, tmp, sizeof op);
        length >>= 1;
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t n = 0; n < 256; n++) table[k][n] = ksds_gf2_times(result, n << (8 * k));
}

static int ksds_detect_hardware(void) {
#if KSDS_X86 && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    return 0;
#endif
}

/* Build the tables and detect the CPU; idempotent (the module calls it once at import). */
static void ksds_crc_init(void) {
    if (ksds_ready) return;
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1u) ? (c >> 1) ^ KSDS_POLY : c >> 1;
        ksds_table[0][n] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int n = 0; n < 256; n++) {
            uint32_t prev = ksds_table[k - 1][n];
            ksds_table[k][n] = (prev >> 8) ^ ksds_table[0][prev & 0xFF];
        }
    ksds_shift_tables(KSDS_LONG_BLOCK, ksds_long_shift);
    ksds_shift_tables(KSDS_SHORT_BLOCK, ksds_short_shift);
    ksds_hardware = ksds_detect_hardware();
    ksds_ready = 1;
}

static inline uint64_t ksds_load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8); /* unaligned load; the x86 and aarch64 targets are little-endian */
    return v;
}

/* The portable walk: slicing by 8. */
static uint32_t ksds_crc_tables(const uint8_t *buf, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    const uint32_t (*t)[256] = (const uint32_t (*)[256])ksds_table;
    while (n >= 8) {
        uint32_t low = crc ^ ((uint32_t)buf[0] | ((uint32_t)buf[1] << 8) |
                              ((uint32_t)buf[2] << 16) | ((uint32_t)buf[3] << 24));
        crc = t[7][low & 0xFF] ^ t[6][(low >> 8) & 0xFF] ^ t[5][(low >> 16) & 0xFF] ^
              t[4][low >> 24] ^ t[3][buf[4]] ^ t[2][buf[5]] ^ t[1][buf[6]] ^ t[0][buf[7]];
        buf += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *buf++) & 0xFF];
    return crc ^ 0xFFFFFFFFu;
}

#if KSDS_X86
static inline uint64_t ksds_shift(uint64_t crc, uint32_t t[4][256]) {
    return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^
           t[3][(crc >> 24) & 0xFF];
}

__attribute__((target("sse4.2")))
static uint32_t ksds_crc_hardware(const uint8_t *buf, size_t n) {
    uint64_t crc = 0xFFFFFFFFu;
    const uint8_t *end = buf + n;
    /* three streams of LONG_BLOCK, then of SHORT_BLOCK bytes */
    while ((size_t)(end - buf) >= 3 * KSDS_LONG_BLOCK) {
        uint64_t crc1 = 0, crc2 = 0;
        const uint8_t *stop = buf + KSDS_LONG_BLOCK;
        while (buf < stop) {
            crc = _mm_crc32_u64(crc, ksds_load64(buf));
            crc1 = _mm_crc32_u64(crc1, ksds_load64(buf + KSDS_LONG_BLOCK));
            crc2 = _mm_crc32_u64(crc2, ksds_load64(buf + 2 * KSDS_LONG_BLOCK));
            buf += 8;
        }
        crc = ksds_shift(crc, ksds_long_shift) ^ crc1;
        crc = ksds_shift(crc, ksds_long_shift) ^ crc2;
        buf += 2 * KSDS_LONG_BLOCK;
    }
    while ((size_t)(end - buf) >= 3 * KSDS_SHORT_BLOCK) {
        uint64_t crc1 = 0, crc2 = 0;
        const uint8_t *stop = buf + KSDS_SHORT_BLOCK;
        while (buf < stop) {
            crc = _mm_crc32_u64(crc, ksds_load64(buf));
            crc1 = _mm_crc32_u64(crc1, ksds_load64(buf + KSDS_SHORT_BLOCK));
            crc2 = _mm_crc32_u64(crc2, ksds_load64(buf + 2 * KSDS_SHORT_BLOCK));
            buf += 8;
        }
        crc = ksds_shift(crc, ksds_short_shift) ^ crc1;
        crc = ksds_shift(crc, ksds_short_shift) ^ crc2;
        buf += 2 * KSDS_SHORT_BLOCK;
    }
    while ((size_t)(end - buf) >= 8) {
        crc = _mm_crc32_u64(crc, ksds_load64(buf));
        buf += 8;
    }
    uint32_t small = (uint32_t)crc;
    while (buf < end) small = _mm_crc32_u8(small, *buf++);
    return small ^ 0xFFFFFFFFu;
}
#endif

/* CRC-32C of n bytes at buf, on the best path this CPU has. */
static inline uint32_t ksds_crc32c(const uint8_t *buf, size_t n) {
#if KSDS_X86
    if (ksds_hardware) return ksds_crc_hardware(buf, n);
#endif
    return ksds_crc_tables(buf, n);
}

#endif /* KSDS_CRC32C_H */
