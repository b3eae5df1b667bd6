/* Gathering slices of a window into one output buffer, for the compiled kernels.
 *
 * A read's key and value bytes go to a fresh output buffer far larger than the caches (100 MB
 * for a million 100-byte values). Plain stores to it first read each cache line from memory (a
 * write-allocate), then write it back: twice the memory traffic of the bytes themselves. The
 * streaming path copies the slices into a small staging buffer that stays in L1 and writes each
 * whole 64-byte line of it out with non-temporal stores, which skip that read. Lines the output
 * shares with bytes outside this call's slices (its first and last, and around a jump in the
 * output offsets) are written with plain stores: another thread may be writing the other bytes
 * of such a line (the gather is split between threads by rows).
 *
 * x86-64 only (SSE2, part of the base instruction set); elsewhere the streaming path is plain
 * memcpy. All functions are static: each extension that includes this header gets its own copy.
 */
#ifndef KSDS_GATHER_H
#define KSDS_GATHER_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(KSDS_PORTABLE_ONLY)
#define KSDS_STREAM 1
#include <emmintrin.h>
#else
#define KSDS_STREAM 0
#endif

#define KSDS_LINE 64
#define KSDS_STAGE 4096 /* a multiple of KSDS_LINE */
#define KSDS_SMALL 128  /* slices up to this long are copied inline (ksds_copy_small) */

typedef struct {
    uint8_t *start; /* the output address stage[0] stands for: line-aligned */
    size_t lead;    /* stage bytes before the first one of ours: not written */
    size_t fill;    /* stage bytes held (lead included) */
    int active;
#if defined(__GNUC__) || defined(__clang__)
    uint8_t stage[KSDS_STAGE] __attribute__((aligned(KSDS_LINE)));
#else
    uint8_t stage[KSDS_STAGE];
#endif
} ksds_stager;

/* Copy m <= KSDS_SMALL bytes exactly (nothing read or written outside the two ranges), inline:
 * a key or a 100-byte value costs less than a call to memcpy. Overlapping pieces cover the
 * tail; the ranges must not overlap. */
static inline void ksds_copy_small(uint8_t *to, const uint8_t *from, size_t m) {
    if (m >= 16) {
#if KSDS_STREAM
        size_t k = 0;
        for (; k + 16 < m; k += 16)
            _mm_storeu_si128((__m128i *)(to + k), _mm_loadu_si128((const __m128i *)(from + k)));
        _mm_storeu_si128((__m128i *)(to + m - 16),
                         _mm_loadu_si128((const __m128i *)(from + m - 16)));
#else
        memcpy(to, from, m);
#endif
    } else if (m >= 8) {
        uint64_t a, b;
        memcpy(&a, from, 8);
        memcpy(&b, from + m - 8, 8);
        memcpy(to, &a, 8);
        memcpy(to + m - 8, &b, 8);
    } else if (m >= 4) {
        uint32_t a, b;
        memcpy(&a, from, 4);
        memcpy(&b, from + m - 4, 4);
        memcpy(to, &a, 4);
        memcpy(to + m - 4, &b, 4);
    } else {
        for (size_t k = 0; k < m; k++) to[k] = from[k];
    }
}

/* Write stage bytes [lead, fill) to their output: whole lines streamed, a part line plainly. */
static void ksds_stager_flush(ksds_stager *s) {
    size_t at = s->lead, fill = s->fill;
    if (!s->active || fill <= at) return;
#if KSDS_STREAM
    if (at % KSDS_LINE) { /* the first line is partly another's */
        size_t line_end = (at / KSDS_LINE + 1) * KSDS_LINE;
        size_t upto = fill < line_end ? fill : line_end;
        memcpy(s->start + at, s->stage + at, upto - at);
        at = upto;
    }
    size_t whole_end = (fill / KSDS_LINE) * KSDS_LINE;
    for (; at < whole_end; at += KSDS_LINE) {
        const __m128i *from = (const __m128i *)(s->stage + at);
        __m128i *to = (__m128i *)(s->start + at);
        /* unaligned loads: as fast on aligned data, and the stage's alignment is a GCC/Clang
         * attribute only */
        _mm_stream_si128(to, _mm_loadu_si128(from));
        _mm_stream_si128(to + 1, _mm_loadu_si128(from + 1));
        _mm_stream_si128(to + 2, _mm_loadu_si128(from + 2));
        _mm_stream_si128(to + 3, _mm_loadu_si128(from + 3));
    }
#endif
    if (at < fill) memcpy(s->start + at, s->stage + at, fill - at); /* the last, part line */
    s->lead = s->fill = 0;
}

static void ksds_stager_close(ksds_stager *s);

/* Append m bytes bound for output address `to`. */
static inline void ksds_stager_put(ksds_stager *s, uint8_t *to, const uint8_t *from, size_t m) {
    if (s->active && to != s->start + s->fill) ksds_stager_close(s); /* a jump */
    if (!s->active) {
        size_t lead = (size_t)((uintptr_t)to % KSDS_LINE);
        s->start = to - lead;
        s->lead = s->fill = lead;
        s->active = 1;
    }
    if (m <= KSDS_SMALL && s->fill + m < KSDS_STAGE) {
        ksds_copy_small(s->stage + s->fill, from, m);
        s->fill += m;
        return;
    }
    while (m) {
        size_t room = KSDS_STAGE - s->fill;
        size_t k = m < room ? m : room;
        memcpy(s->stage + s->fill, from, k);
        s->fill += k;
        from += k;
        m -= k;
        if (s->fill == KSDS_STAGE) {
            ksds_stager_flush(s);
            s->start += KSDS_STAGE;
        }
    }
}

/* Close the stager; makes the streamed stores visible before later stores (SFENCE). */
static void ksds_stager_close(ksds_stager *s) {
    ksds_stager_flush(s);
    s->active = 0;
#if KSDS_STREAM
    _mm_sfence();
#endif
}

/* Copy the slices [p[i], p[i] + ln[i]) of the sources (src1's positions follow src0's) to out +
 * off[i]; ln[i] <= 0 copies nothing. A slice outside its sources is zeroed and one outside the
 * output skipped; returns how many were either. `stream`: through the stager (see above). */
static int64_t ksds_gather(uint8_t *out, int64_t size, const uint8_t *in0, int64_t len0,
                           const uint8_t *in1, int64_t len1, const int64_t *p,
                           const int64_t *ln, const int32_t *off, int64_t n, int stream) {
    int64_t bad = 0;
    ksds_stager stager;
    stager.active = 0;
    stream = stream && KSDS_STREAM;
    for (int64_t i = 0; i < n; i++) {
        int64_t m = ln[i];
        if (m <= 0) continue;
        int64_t o = off[i], q = p[i];
        const uint8_t *from;
        if (o < 0 || o + m > size) {
            bad++;
            continue;
        }
        if (q >= 0 && q + m <= len0) {
            from = in0 + q;
        } else if (len0 <= q && q - len0 + m <= len1) {
            from = in1 + (q - len0);
        } else {
            if (stream) ksds_stager_close(&stager);
            memset(out + o, 0, (size_t)m);
            bad++;
            continue;
        }
        if (stream)
            ksds_stager_put(&stager, out + o, from, (size_t)m);
        else if (m <= KSDS_SMALL)
            ksds_copy_small(out + o, from, (size_t)m);
        else
            memcpy(out + o, from, (size_t)m);
    }
    if (stream) ksds_stager_close(&stager);
    return bad;
}

/* Fresh output memory: a new process's first read writes ~150 MB of Arrow buffers the kernel has
 * not mapped yet, and each first touch of a page is a fault (on a VM whose host takes freed memory
 * back, a slow one). ksds_populate faults the whole pages of a range in, writable, without
 * changing a byte (MADV_POPULATE_WRITE, Linux 5.14+; an older kernel refuses it), so another
 * thread can take half of a buffer's faults while the gather writes the other half; ksds_mapped
 * says whether the page holding an address is mapped already (mincore), to skip that where the
 * pool reuses memory. */
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14's value; headers before glibc 2.35 lack it */
#endif
#endif

static long ksds_page_size(void) {
#if defined(__linux__)
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? page : 4096;
#else
    return 4096;
#endif
}

/* 1 if the range's whole pages were faulted in, 0 if none or the kernel cannot. */
static int ksds_populate(uint8_t *start, size_t length) {
#if defined(__linux__)
    uintptr_t page = (uintptr_t)ksds_page_size();
    uintptr_t from = ((uintptr_t)start + page - 1) & ~(page - 1);
    uintptr_t to = ((uintptr_t)start + length) & ~(page - 1);
    if (to <= from) return 0;
    return madvise((void *)from, to - from, MADV_POPULATE_WRITE) == 0;
#else
    (void)start;
    (void)length;
    return 0;
#endif
}

/* 1 if the page holding `at` is mapped, 0 if not, -1 if unknown. */
static int ksds_mapped(const uint8_t *at) {
#if defined(__linux__)
    uintptr_t page = (uintptr_t)ksds_page_size();
    unsigned char present = 0;
    if (mincore((void *)((uintptr_t)at & ~(page - 1)), 1, &present) != 0) return -1;
    return present & 1;
#else
    (void)at;
    return -1;
#endif
}

#endif
