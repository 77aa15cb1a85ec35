/* Where every field of the records of a v2 record batch lies: an optional compiled helper.
 *
 * A v2 record says where the next one starts only through its own length prefix, so finding
 * the records of a batch is a sequential walk: about 90 ns a record in CPython, and the one
 * step of reading records column-wise (kwire.spark.columns) that numpy cannot do.  This module
 * does the walk and reads every record's fields on the way, in one pass (about 20 ns a 100 B
 * record, call included); the caller builds columns from what it writes.  It also lays the
 * values of records out one after the other where they lie (`pack`), for a values column that
 * needs no buffer of its own.  `scan_v2` is the accelerator of kwire.protocol.records.walk
 * (scan_records, scan_sections), whose Python fallback runs where this module is not built and
 * gives the same results (tests/protocol/test_records_walk.py holds the two to that on fuzzed
 * batches); the walk warns once, and `kwire --version` says so, when it is not built.
 *
 * Layout of a record (Kafka's v2 message format): length varint, attributes int8, timestamp
 * delta varlong, offset delta varint, key length varint, key, value length varint, value,
 * header count varint, headers.  Varints are zigzag-encoded; a negative key or value length is
 * a null key or value.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

/* The rows of the output array, one int64 per record in each. */
enum {
    F_TIMESTAMP_DELTA,
    F_OFFSET_DELTA,
    F_KEY_AT,
    F_KEY_LENGTH,
    F_VALUE_AT,
    F_VALUE_LENGTH,
    F_HEADER_COUNT,
    F_HEADERS_AT,
    F_END,
    N_FIELDS
};

/* A zigzag varint of at most `width` bytes at `p`, all of them before `end`: the number of
 * bytes it takes, or 0 if it does not end within `width` bytes or before `end`. */
static inline int read_varint(const uint8_t *p, const uint8_t *end, int width, int64_t *value)
{
    uint64_t raw = 0;
    for (int i = 0; i < width; i++) {
        if (p + i >= end)
            return 0;
        uint8_t b = p[i];
        raw |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return i + 1;
        }
    }
    return 0;
}

/* A key or value at `*p`: a zigzag varint length (negative: null) and that many bytes, all
 * before `end`.  Sets where its bytes start and its length and moves `*p` past it; 0 if it does
 * not fit. */
static inline int read_bytes(const uint8_t **p, const uint8_t *end, const uint8_t **at, int64_t *length)
{
    int used = read_varint(*p, end, 5, length);
    if (!used || (*length > 0 && *length > end - (*p + used)))
        return 0;
    *at = *p + used;
    *p = *at + (*length > 0 ? *length : 0);
    return 1;
}

/* One v2 record, as the walk reads it: where it starts and ends, its deltas, where its key,
 * value and headers lie (a negative length: null), its header count. */
typedef struct {
    const uint8_t *start, *key, *value, *headers, *end;
    int64_t ts_delta, off_delta, key_length, value_length, header_count;
} v2_record;

/* The walk's one step: the record at `p`, which must end by `limit`, read into `*r`; 0 if it
 * does not parse.  Every reader of records here goes through it (scan_v2 for
 * kwire.protocol.records.walk, the log cleaner's map_put_v2 and map_keep_v2), and its checks
 * are the Python walk's (walk._scan_exact): a length that fits, every field within the record,
 * a header count not negative, and a record without headers ending right after its count (one
 * with headers has them parsed by the caller, which checks that they end where the record
 * does). */
static inline int walk_record(const uint8_t *p, const uint8_t *limit, v2_record *r)
{
    int64_t length;
    int used = read_varint(p, limit, 5, &length);
    if (!used || length <= 0 || length > limit - (p + used))
        return 0;
    r->start = p;
    p += used;
    const uint8_t *end = p + length;
    /* The walk waits on memory at every record (where the next one starts is known only
     * here), and records that just came off the network are rarely in this core's cache.
     * Records of one batch are usually of about one size: ask for the start of the record
     * eight ahead now.  Halves the walk's time over 1 KiB records (a prefetch never faults,
     * so a wrong guess costs nothing but the request). */
    if (8 * (end - r->start) < limit - end)
        __builtin_prefetch(end + 8 * (end - r->start), 0, 3);
    p += 1;  /* attributes: unused since Kafka 0.11 */
    if (!(used = read_varint(p, end, 10, &r->ts_delta)))
        return 0;
    p += used;
    if (!(used = read_varint(p, end, 5, &r->off_delta)))
        return 0;
    p += used;
    if (!read_bytes(&p, end, &r->key, &r->key_length) || !read_bytes(&p, end, &r->value, &r->value_length))
        return 0;
    if (!(used = read_varint(p, end, 5, &r->header_count)) || r->header_count < 0)
        return 0;
    p += used;
    if (r->header_count == 0 && p != end)
        return 0;
    r->headers = p;
    r->end = end;
    return 1;
}

/* The records of one batch: `count` records from `buf[pos]` exactly to `buf[stop]`.  Fills
 * column `row + i` of `out` for record i.  Returns -1 if every record parses, else the index of
 * the first record that does not (`count` if the records end short of `stop`). */
static Py_ssize_t scan_records(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t stop, Py_ssize_t count,
                               int64_t *out, Py_ssize_t stride, Py_ssize_t row)
{
    const uint8_t *limit = buf + stop;
    const uint8_t *p = buf + pos;
    for (Py_ssize_t i = 0; i < count; i++) {
        v2_record r;
        if (!walk_record(p, limit, &r))
            return i;
        int64_t *column = out + row + i;
        column[F_TIMESTAMP_DELTA * stride] = r.ts_delta;
        column[F_OFFSET_DELTA * stride] = r.off_delta;
        column[F_KEY_AT * stride] = r.key - buf;
        column[F_KEY_LENGTH * stride] = r.key_length;
        column[F_VALUE_AT * stride] = r.value - buf;
        column[F_VALUE_LENGTH * stride] = r.value_length;
        column[F_HEADER_COUNT * stride] = r.header_count;
        column[F_HEADERS_AT * stride] = r.headers - buf;
        column[F_END * stride] = r.end - buf;
        p = r.end;
    }
    return p == limit ? -1 : count;
}

PyDoc_STRVAR(scan_v2_doc,
"scan_v2(buf, pos, stop, count, out, row) -> int\n\n"
"Read the fields of the `count` v2 records in buf[pos:stop] into columns row..row+count-1 of\n"
"`out`, a C-contiguous int64 array of shape (9, N): timestamp delta, offset delta, key position,\n"
"key length, value position, value length, header count, headers position, record end\n"
"(positions in `buf`).  Returns -1 if every record parses and they fill buf[pos:stop]\n"
"exactly, else the index of the first record that does not (`count`: they end short).");

static PyObject *scan_v2(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, out;
    Py_ssize_t pos, stop, count, row;
    if (!PyArg_ParseTuple(args, "y*nnnw*n", &data, &pos, &stop, &count, &out, &row))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t stride = out.len / (Py_ssize_t)(N_FIELDS * sizeof(int64_t));
    if (out.itemsize != sizeof(int64_t) || out.len % (N_FIELDS * sizeof(int64_t)) != 0) {
        PyErr_SetString(PyExc_ValueError, "out must be an int64 array of shape (9, N)");
    } else if (pos < 0 || stop < pos || stop > data.len) {
        PyErr_Format(PyExc_ValueError, "records at %zd..%zd are outside a buffer of %zd bytes", pos, stop, data.len);
    } else if (count < 0 || row < 0 || row > stride - count) {
        PyErr_Format(PyExc_ValueError, "%zd records from column %zd do not fit in %zd columns", count, row, stride);
    } else {
        Py_ssize_t bad;
        Py_BEGIN_ALLOW_THREADS
        bad = scan_records((const uint8_t *)data.buf, pos, stop, count, (int64_t *)out.buf, stride, row);
        Py_END_ALLOW_THREADS
        result = PyLong_FromSsize_t(bad);
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    return result;
}

/* The number of spans `at` and `length` describe (one int64 each), or -1 with ValueError set
 * if they are not int64 arrays of the same size. */
static Py_ssize_t span_count(const Py_buffer *at, const Py_buffer *length)
{
    if (at->itemsize != sizeof(int64_t) || length->itemsize != sizeof(int64_t) || at->len != length->len) {
        PyErr_SetString(PyExc_ValueError, "at and length must be int64 arrays of the same size");
        return -1;
    }
    return at->len / (Py_ssize_t)sizeof(int64_t);
}

PyDoc_STRVAR(gather_doc,
"gather(buf, at, length, out) -> None\n\n"
"Copy the byte strings buf[at[i]:at[i] + length[i]] one after the other into `out`, whose size\n"
"must be their total (a negative length, a null, copies nothing).  `at` and `length` are int64\n"
"arrays of the same size.  The values column of records read with scan_v2, in one pass.");

static PyObject *gather(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, at, length, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &data, &at, &length, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = span_count(&at, &length);
    if (n < 0)
        goto done;
    const int64_t *starts = (const int64_t *)at.buf, *sizes = (const int64_t *)length.buf;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sizes[i] <= 0)
            continue;
        if (starts[i] < 0 || starts[i] > data.len || sizes[i] > data.len - starts[i]) {
            PyErr_Format(PyExc_ValueError, "span %zd (%lld bytes at %lld) is outside a buffer of %zd bytes",
                         i, (long long)sizes[i], (long long)starts[i], data.len);
            goto done;
        }
        total += (Py_ssize_t)sizes[i];
    }
    if (total != out.len) {
        PyErr_Format(PyExc_ValueError, "the spans hold %zd bytes, out has room for %zd", total, out.len);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *src = (const uint8_t *)data.buf;
    uint8_t *dst = (uint8_t *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sizes[i] > 0) {
            memcpy(dst, src + starts[i], (size_t)sizes[i]);
            dst += sizes[i];
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&at);
    PyBuffer_Release(&length);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(pack_doc,
"pack(buf, at, length, into) -> int\n\n"
"Move the byte strings buf[at[i]:at[i] + length[i]] so that they lie one after the other from\n"
"buf[into], in order, inside `buf` itself (writable); return where the last one ends.  The spans\n"
"must come in increasing order without overlapping, and `into` must not be after the first:\n"
"then no string is written over one not yet moved.  A negative length (a null) moves nothing.\n"
"What lay between `into` and the last span's end is given up: apart from the packed strings,\n"
"those bytes are left as whatever the moves made of them.");

static PyObject *pack(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, at, length;
    Py_ssize_t into;
    if (!PyArg_ParseTuple(args, "w*y*y*n", &data, &at, &length, &into))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = span_count(&at, &length);
    if (n < 0)
        goto done;
    const int64_t *starts = (const int64_t *)at.buf, *sizes = (const int64_t *)length.buf;
    /* Every check before the first byte moves: a refused call leaves the buffer as it was. */
    Py_ssize_t read_from = into;  /* no span may start before the bytes already claimed */
    if (into < 0 || into > data.len) {
        PyErr_Format(PyExc_ValueError, "into=%zd is outside a buffer of %zd bytes", into, data.len);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sizes[i] < 0)
            continue;
        if (starts[i] < read_from || starts[i] > data.len || sizes[i] > data.len - starts[i]) {
            PyErr_Format(PyExc_ValueError,
                         "span %zd (%lld bytes at %lld) is outside a buffer of %zd bytes, or before the end "
                         "of the span before it or `into` (%zd)",
                         i, (long long)sizes[i], (long long)starts[i], data.len, read_from);
            goto done;
        }
        read_from = (Py_ssize_t)(starts[i] + sizes[i]);
    }
    Py_ssize_t to = into;
    Py_BEGIN_ALLOW_THREADS
    uint8_t *buf = (uint8_t *)data.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sizes[i] > 0) {
            if (to != starts[i])
                memmove(buf + to, buf + starts[i], (size_t)sizes[i]);
            to += (Py_ssize_t)sizes[i];
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(to);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&at);
    PyBuffer_Release(&length);
    return result;
}

/* -- The log cleaner's walks (kwire.broker.storage.offset_map) ----------------------------------
 *
 * Kafka's cleaner reads every record of the dirty segments twice: once to map each key to its
 * latest offset, once to decide what to copy.  Both need only where a record lies, its offset
 * and timestamp deltas, its key and whether its value is null.  These functions walk a batch's
 * records for that and do the dedupe map's work in the same loop, on the map's own buffer (Kafka's
 * SkimpyOffsetMap: 24-byte slots, the MD5 of a key and its offset as a big-endian int64, linear
 * probing from the digest's first 8 bytes, an all-zero digest taken as ...01), without the GIL:
 * the broker's event loop runs while the cleaner walks.  They read records with the record
 * walk's one step (walk_record), so they accept and refuse the records kwire.protocol.records.
 * walk does; offset_map.py does the same in Python on that walk's Python fallback (the tests
 * compare the two). */

#define SLOT_BYTES 24
#define DIGEST_BYTES 16

/* MD5 (RFC 1321), the hash of Kafka's SkimpyOffsetMap.  Its sine table is computed at import. */
static uint32_t md5_k[64];

/* One 64-byte block, unrolled (the round functions and rotations as constants). */
#define MD5_F1(b, c, d) ((d) ^ ((b) & ((c) ^ (d))))
#define MD5_F2(b, c, d) ((c) ^ ((d) & ((b) ^ (c))))
#define MD5_F3(b, c, d) ((b) ^ (c) ^ (d))
#define MD5_F4(b, c, d) ((c) ^ ((b) | ~(d)))
#define MD5_STEP(f, a, b, c, d, x, k, s)                   \
    do {                                                   \
        (a) += f((b), (c), (d)) + (x) + (k);               \
        (a) = (((a) << (s)) | ((a) >> (32 - (s)))) + (b); \
    } while (0)

static void md5_block(uint32_t h[4], const uint8_t *block)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)block[4 * i] | (uint32_t)block[4 * i + 1] << 8 | (uint32_t)block[4 * i + 2] << 16 |
               (uint32_t)block[4 * i + 3] << 24;
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    MD5_STEP(MD5_F1, a, b, c, d, m[0], md5_k[0], 7);
    MD5_STEP(MD5_F1, d, a, b, c, m[1], md5_k[1], 12);
    MD5_STEP(MD5_F1, c, d, a, b, m[2], md5_k[2], 17);
    MD5_STEP(MD5_F1, b, c, d, a, m[3], md5_k[3], 22);
    MD5_STEP(MD5_F1, a, b, c, d, m[4], md5_k[4], 7);
    MD5_STEP(MD5_F1, d, a, b, c, m[5], md5_k[5], 12);
    MD5_STEP(MD5_F1, c, d, a, b, m[6], md5_k[6], 17);
    MD5_STEP(MD5_F1, b, c, d, a, m[7], md5_k[7], 22);
    MD5_STEP(MD5_F1, a, b, c, d, m[8], md5_k[8], 7);
    MD5_STEP(MD5_F1, d, a, b, c, m[9], md5_k[9], 12);
    MD5_STEP(MD5_F1, c, d, a, b, m[10], md5_k[10], 17);
    MD5_STEP(MD5_F1, b, c, d, a, m[11], md5_k[11], 22);
    MD5_STEP(MD5_F1, a, b, c, d, m[12], md5_k[12], 7);
    MD5_STEP(MD5_F1, d, a, b, c, m[13], md5_k[13], 12);
    MD5_STEP(MD5_F1, c, d, a, b, m[14], md5_k[14], 17);
    MD5_STEP(MD5_F1, b, c, d, a, m[15], md5_k[15], 22);
    MD5_STEP(MD5_F2, a, b, c, d, m[1], md5_k[16], 5);
    MD5_STEP(MD5_F2, d, a, b, c, m[6], md5_k[17], 9);
    MD5_STEP(MD5_F2, c, d, a, b, m[11], md5_k[18], 14);
    MD5_STEP(MD5_F2, b, c, d, a, m[0], md5_k[19], 20);
    MD5_STEP(MD5_F2, a, b, c, d, m[5], md5_k[20], 5);
    MD5_STEP(MD5_F2, d, a, b, c, m[10], md5_k[21], 9);
    MD5_STEP(MD5_F2, c, d, a, b, m[15], md5_k[22], 14);
    MD5_STEP(MD5_F2, b, c, d, a, m[4], md5_k[23], 20);
    MD5_STEP(MD5_F2, a, b, c, d, m[9], md5_k[24], 5);
    MD5_STEP(MD5_F2, d, a, b, c, m[14], md5_k[25], 9);
    MD5_STEP(MD5_F2, c, d, a, b, m[3], md5_k[26], 14);
    MD5_STEP(MD5_F2, b, c, d, a, m[8], md5_k[27], 20);
    MD5_STEP(MD5_F2, a, b, c, d, m[13], md5_k[28], 5);
    MD5_STEP(MD5_F2, d, a, b, c, m[2], md5_k[29], 9);
    MD5_STEP(MD5_F2, c, d, a, b, m[7], md5_k[30], 14);
    MD5_STEP(MD5_F2, b, c, d, a, m[12], md5_k[31], 20);
    MD5_STEP(MD5_F3, a, b, c, d, m[5], md5_k[32], 4);
    MD5_STEP(MD5_F3, d, a, b, c, m[8], md5_k[33], 11);
    MD5_STEP(MD5_F3, c, d, a, b, m[11], md5_k[34], 16);
    MD5_STEP(MD5_F3, b, c, d, a, m[14], md5_k[35], 23);
    MD5_STEP(MD5_F3, a, b, c, d, m[1], md5_k[36], 4);
    MD5_STEP(MD5_F3, d, a, b, c, m[4], md5_k[37], 11);
    MD5_STEP(MD5_F3, c, d, a, b, m[7], md5_k[38], 16);
    MD5_STEP(MD5_F3, b, c, d, a, m[10], md5_k[39], 23);
    MD5_STEP(MD5_F3, a, b, c, d, m[13], md5_k[40], 4);
    MD5_STEP(MD5_F3, d, a, b, c, m[0], md5_k[41], 11);
    MD5_STEP(MD5_F3, c, d, a, b, m[3], md5_k[42], 16);
    MD5_STEP(MD5_F3, b, c, d, a, m[6], md5_k[43], 23);
    MD5_STEP(MD5_F3, a, b, c, d, m[9], md5_k[44], 4);
    MD5_STEP(MD5_F3, d, a, b, c, m[12], md5_k[45], 11);
    MD5_STEP(MD5_F3, c, d, a, b, m[15], md5_k[46], 16);
    MD5_STEP(MD5_F3, b, c, d, a, m[2], md5_k[47], 23);
    MD5_STEP(MD5_F4, a, b, c, d, m[0], md5_k[48], 6);
    MD5_STEP(MD5_F4, d, a, b, c, m[7], md5_k[49], 10);
    MD5_STEP(MD5_F4, c, d, a, b, m[14], md5_k[50], 15);
    MD5_STEP(MD5_F4, b, c, d, a, m[5], md5_k[51], 21);
    MD5_STEP(MD5_F4, a, b, c, d, m[12], md5_k[52], 6);
    MD5_STEP(MD5_F4, d, a, b, c, m[3], md5_k[53], 10);
    MD5_STEP(MD5_F4, c, d, a, b, m[10], md5_k[54], 15);
    MD5_STEP(MD5_F4, b, c, d, a, m[1], md5_k[55], 21);
    MD5_STEP(MD5_F4, a, b, c, d, m[8], md5_k[56], 6);
    MD5_STEP(MD5_F4, d, a, b, c, m[15], md5_k[57], 10);
    MD5_STEP(MD5_F4, c, d, a, b, m[6], md5_k[58], 15);
    MD5_STEP(MD5_F4, b, c, d, a, m[13], md5_k[59], 21);
    MD5_STEP(MD5_F4, a, b, c, d, m[4], md5_k[60], 6);
    MD5_STEP(MD5_F4, d, a, b, c, m[11], md5_k[61], 10);
    MD5_STEP(MD5_F4, c, d, a, b, m[2], md5_k[62], 15);
    MD5_STEP(MD5_F4, b, c, d, a, m[9], md5_k[63], 21);
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

static void md5(const uint8_t *data, size_t length, uint8_t out[DIGEST_BYTES])
{
    uint32_t h[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    size_t full = length & ~(size_t)63;
    for (size_t i = 0; i < full; i += 64)
        md5_block(h, data + i);
    uint8_t tail[128];
    size_t rest = length - full;
    memset(tail, 0, sizeof(tail));
    if (rest)
        memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    size_t blocks = rest < 56 ? 1 : 2;
    uint64_t bits = (uint64_t)length * 8;
    for (int i = 0; i < 8; i++)
        tail[64 * blocks - 8 + i] = (uint8_t)(bits >> (8 * i));
    for (size_t i = 0; i < blocks; i++)
        md5_block(h, tail + 64 * i);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (uint8_t)(h[i] >> (8 * j));
}

/* The map's digest of a key: its MD5, the last bit set if all zero (zero marks an empty slot). */
static void key_digest(const uint8_t *key, int64_t length, uint8_t out[DIGEST_BYTES])
{
    md5(key, (size_t)length, out);
    static const uint8_t zero[DIGEST_BYTES];
    if (memcmp(out, zero, DIGEST_BYTES) == 0)
        out[DIGEST_BYTES - 1] = 1;
}

/* The slot holding `digest` in a map of `slots` slots, or the empty one where it goes; *found
 * says which.  NULL if the map is full without it. */
static uint8_t *find_slot(uint8_t *map, Py_ssize_t slots, const uint8_t digest[DIGEST_BYTES], int *found)
{
    static const uint8_t zero[DIGEST_BYTES];
    uint64_t first = 0;
    for (int i = 0; i < 8; i++)
        first = first << 8 | digest[i];
    Py_ssize_t slot = (Py_ssize_t)(first % (uint64_t)slots);
    for (Py_ssize_t n = 0; n < slots; n++) {
        uint8_t *at = map + slot * SLOT_BYTES;
        if (memcmp(at, digest, DIGEST_BYTES) == 0) {
            *found = 1;
            return at;
        }
        if (memcmp(at, zero, DIGEST_BYTES) == 0) {
            *found = 0;
            return at;
        }
        slot = slot + 1 < slots ? slot + 1 : 0;
    }
    *found = 0;
    return NULL;
}

static inline void store_offset(uint8_t *at, int64_t offset)
{
    uint64_t v = (uint64_t)offset;
    for (int i = 7; i >= 0; i--, v >>= 8)
        at[i] = (uint8_t)v;
}

static inline int64_t load_offset(const uint8_t *at)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | at[i];
    return (int64_t)v;
}

/* A map buffer of `slots` slots: checks and a message.  0 if it does not fit. */
static int check_map(const Py_buffer *map, Py_ssize_t slots)
{
    if (slots < 1 || map->len / SLOT_BYTES < slots) {
        PyErr_Format(PyExc_ValueError, "a map of %zd slots does not fit in %zd bytes", slots, map->len);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(map_put_v2_doc,
"map_put_v2(buf, pos, stop, count, base_offset, start, map, slots, capacity, size, skip, release_gil=True)\n"
"    -> (stopped, size)\n\n"
"For each of the `count` v2 records in buf[pos:stop] from the `skip`-th on (the ones before are\n"
"only walked over), in order, whose offset (base_offset + its\n"
"offset delta) is at least `start` and whose key is not null, put key -> offset into `map` (a\n"
"writable buffer of `slots` 24-byte slots holding `size` keys), unless it holds `capacity` keys\n"
"already: that stops the walk.  Returns (-1 if every record was taken, else the index of the\n"
"record that found the map full, or -2 - the index of a record that does not parse (-2 - count:\n"
"the records end short of `stop`); the keys the map holds now).  Runs without the GIL unless\n"
"`release_gil` is false (a short walk: see kwire.broker.storage.cleaner).");

static PyObject *map_put_v2(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, map;
    Py_ssize_t pos, stop, count, slots, capacity, size, skip;
    long long base_offset, start;
    int release_gil = 1;
    if (!PyArg_ParseTuple(args, "y*nnnLLw*nnnn|p", &data, &pos, &stop, &count, &base_offset, &start, &map, &slots,
                          &capacity, &size, &skip, &release_gil))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t stopped = -1;
    if (pos < 0 || stop < pos || stop > data.len) {
        PyErr_Format(PyExc_ValueError, "records at %zd..%zd are outside a buffer of %zd bytes", pos, stop, data.len);
        goto done;
    }
    if (!check_map(&map, slots))
        goto done;
    if (capacity > slots)
        capacity = slots;
    PyThreadState *saved = release_gil ? PyEval_SaveThread() : NULL;
    const uint8_t *buf = (const uint8_t *)data.buf, *p = buf + pos, *limit = buf + stop;
    uint8_t digest[DIGEST_BYTES];
    for (Py_ssize_t i = 0; i < count; i++) {
        v2_record r;
        if (!walk_record(p, limit, &r)) {
            stopped = -2 - i;
            break;
        }
        p = r.end;
        int64_t offset = (int64_t)base_offset + r.off_delta;
        if (i < skip || r.key_length < 0 || offset < start)
            continue;
        if (size >= capacity) {
            stopped = i;
            break;
        }
        key_digest(r.key, r.key_length, digest);
        int found;
        uint8_t *at = find_slot((uint8_t *)map.buf, slots, digest, &found);
        if (!found) {  /* never NULL: size < capacity <= slots leaves an empty slot */
            memcpy(at, digest, DIGEST_BYTES);
            size++;
        }
        store_offset(at + DIGEST_BYTES, offset);
    }
    if (stopped == -1 && p != limit)
        stopped = -2 - count;
    if (saved != NULL)
        PyEval_RestoreThread(saved);
    result = Py_BuildValue("(nn)", stopped, size);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&map);
    return result;
}

PyDoc_STRVAR(map_keep_v2_doc,
"map_keep_v2(buf, pos, stop, count, base_offset, latest, keep_tombstones, map, slots, bits, bits_from,\n"
"            release_gil=True)\n"
"    -> (kept, tombstones, max_ts_delta, spans)\n\n"
"Which of the `count` v2 records in buf[pos:stop] the log cleaner keeps: one whose offset is after\n"
"`latest`; else one with a key that `map` (as map_put_v2 fills it) does not map to a later offset,\n"
"a null value only if `keep_tombstones`.  For an offset o that `bits` covers (bits_from <= o <\n"
"bits_from + 8 * len(bits)), bit o - bits_from (as map_bitmap sets them) answers instead of the\n"
"map: set if the map holds o for some key, so the key needs no hashing.  Returns how many are kept, how many of them have a null\n"
"value, the largest timestamp delta among them (-2**63 if none) and a list of their byte spans in\n"
"buf (start, end, start, end, ...; adjacent records in one span).  `kept` is -1 - the index of a\n"
"record that does not parse (-1 - count: the records end short of `stop`).  Walks without the GIL\n"
"unless `release_gil` is false.");

static PyObject *map_keep_v2(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, map;
    Py_ssize_t pos, stop, count, slots;
    long long base_offset, latest;
    int keep_tombstones;
    Py_buffer bits;
    long long bits_from;
    int release_gil = 1;
    if (!PyArg_ParseTuple(args, "y*nnnLLpy*ny*L|p", &data, &pos, &stop, &count, &base_offset, &latest,
                          &keep_tombstones, &map, &slots, &bits, &bits_from, &release_gil))
        return NULL;
    PyObject *result = NULL, *spans = NULL;
    Py_ssize_t *at = NULL;
    if (pos < 0 || stop < pos || stop > data.len) {
        PyErr_Format(PyExc_ValueError, "records at %zd..%zd are outside a buffer of %zd bytes", pos, stop, data.len);
        goto done;
    }
    if (!check_map(&map, slots))
        goto done;
    /* Room for the spans of every record that can parse (6 bytes at least each), whatever
     * `count` says. */
    Py_ssize_t most = (stop - pos) / 6 + 1;
    if (count >= 0 && count < most)
        most = count;
    if ((at = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(2 * most + 2))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t kept = 0, tombstones = 0, n_spans = 0;
    int64_t max_ts = INT64_MIN, bits_end = (int64_t)bits.len * 8;
    PyThreadState *saved = release_gil ? PyEval_SaveThread() : NULL;
    const uint8_t *buf = (const uint8_t *)data.buf, *p = buf + pos, *limit = buf + stop;
    uint8_t digest[DIGEST_BYTES];
    for (Py_ssize_t i = 0; i < count; i++) {
        v2_record r;
        if (!walk_record(p, limit, &r)) {
            kept = -1 - i;
            break;
        }
        p = r.end;
        int64_t offset = (int64_t)base_offset + r.off_delta;
        if (offset <= latest) {
            if (r.key_length < 0)
                continue;
            if (offset >= bits_from && offset - bits_from < bits_end) {
                int64_t bit = offset - bits_from;
                if (!(((const uint8_t *)bits.buf)[bit >> 3] & (1u << (bit & 7))))
                    continue;  /* the map holds a later offset for its key */
                if (r.value_length < 0 && !keep_tombstones)
                    continue;
                goto keep;
            }
            key_digest(r.key, r.key_length, digest);
            int found;
            uint8_t *slot = find_slot((uint8_t *)map.buf, slots, digest, &found);
            if (offset < (found ? load_offset(slot + DIGEST_BYTES) : -1))  /* -1: not in the map */
                continue;
            if (r.value_length < 0 && !keep_tombstones)
                continue;
        }
    keep:
        kept++;
        if (r.value_length < 0)
            tombstones++;
        if (r.ts_delta > max_ts)
            max_ts = r.ts_delta;
        Py_ssize_t s = r.start - buf, e = r.end - buf;
        if (n_spans && at[2 * n_spans - 1] == s) {
            at[2 * n_spans - 1] = e;
        } else {
            at[2 * n_spans] = s;
            at[2 * n_spans + 1] = e;
            n_spans++;
        }
    }
    if (kept >= 0 && p != limit)
        kept = -1 - count;
    if (saved != NULL)
        PyEval_RestoreThread(saved);
    if (kept < 0)
        n_spans = 0;
    if ((spans = PyList_New(2 * n_spans)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < 2 * n_spans; i++) {
        PyObject *v = PyLong_FromSsize_t(at[i]);
        if (v == NULL)
            goto done;
        PyList_SET_ITEM(spans, i, v);
    }
    result = Py_BuildValue("(nnLO)", kept, tombstones, (long long)max_ts, spans);
done:
    Py_XDECREF(spans);
    PyMem_Free(at);
    PyBuffer_Release(&data);
    PyBuffer_Release(&map);
    PyBuffer_Release(&bits);
    return result;
}

PyDoc_STRVAR(map_bitmap_doc,
"map_bitmap(map, slots, first, out) -> int\n\n"
"Set bit o - first of `out` (bit i is bit i % 8 of byte i // 8) for every offset o the map holds\n"
"with first <= o < first + 8 * len(out); returns how many.  Without the GIL.");

static PyObject *map_bitmap(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer map, out;
    Py_ssize_t slots, set = 0;
    long long first;
    if (!PyArg_ParseTuple(args, "y*nLw*", &map, &slots, &first, &out))
        return NULL;
    PyObject *result = NULL;
    if (check_map(&map, slots)) {
        Py_BEGIN_ALLOW_THREADS
        static const uint8_t zero[DIGEST_BYTES];
        int64_t span = (int64_t)out.len * 8;
        uint8_t *bits = (uint8_t *)out.buf;
        for (Py_ssize_t i = 0; i < slots; i++) {
            const uint8_t *entry = (const uint8_t *)map.buf + i * SLOT_BYTES;
            if (memcmp(entry, zero, DIGEST_BYTES) == 0)
                continue;
            int64_t offset = load_offset(entry + DIGEST_BYTES);
            if (offset >= first && offset - first < span) {
                int64_t bit = offset - first;
                bits[bit >> 3] |= (uint8_t)(1u << (bit & 7));
                set++;
            }
        }
        Py_END_ALLOW_THREADS
        result = PyLong_FromSsize_t(set);
    }
    PyBuffer_Release(&map);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(map_rehash_doc,
"map_rehash(old, old_slots, new, new_slots) -> int\n\n"
"Put every entry of the map `old` (of `old_slots` slots) into the empty map `new` (`new_slots`\n"
"slots, at least as many as old has entries); returns how many were moved.  Without the GIL.");

static PyObject *map_rehash(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer old, new;
    Py_ssize_t old_slots, new_slots, moved = 0, lost = 0;
    if (!PyArg_ParseTuple(args, "y*nw*n", &old, &old_slots, &new, &new_slots))
        return NULL;
    PyObject *result = NULL;
    if (!check_map(&old, old_slots) || !check_map(&new, new_slots))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    static const uint8_t zero[DIGEST_BYTES];
    for (Py_ssize_t i = 0; i < old_slots; i++) {
        const uint8_t *entry = (const uint8_t *)old.buf + i * SLOT_BYTES;
        if (memcmp(entry, zero, DIGEST_BYTES) == 0)
            continue;
        int found;
        uint8_t *at = find_slot((uint8_t *)new.buf, new_slots, entry, &found);
        if (at == NULL) {
            lost++;
            break;
        }
        memcpy(at, entry, SLOT_BYTES);
        moved++;
    }
    Py_END_ALLOW_THREADS
    if (lost)
        PyErr_SetString(PyExc_OverflowError, "the new map is too small for the old one's entries");
    else
        result = PyLong_FromSsize_t(moved);
done:
    PyBuffer_Release(&old);
    PyBuffer_Release(&new);
    return result;
}

PyDoc_STRVAR(md5_digest_doc,
"key_digest(key) -> bytes\n\n"
"The dedupe map's digest of a key (its MD5, the last bit set if all zero), as the walks compute it.");

static PyObject *md5_digest(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer key;
    if (!PyArg_ParseTuple(args, "y*", &key))
        return NULL;
    uint8_t out[DIGEST_BYTES];
    key_digest((const uint8_t *)key.buf, key.len, out);
    PyBuffer_Release(&key);
    return PyBytes_FromStringAndSize((const char *)out, DIGEST_BYTES);
}

/* ---------------------------------------------------------------------------------------------
 * Encoding: many records into the records section of a v2 batch (the producer's bulk path,
 * kwire.protocol.records.bulk; that module has the same functions in Python, byte for byte).
 */

/* Bytes of the zigzag varint of `value`. */
static inline Py_ssize_t zigzag_size(int64_t value)
{
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_zigzag(uint8_t *p, int64_t value)
{
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (raw >= 0x80) {
        *p++ = (uint8_t)(raw | 0x80);
        raw >>= 7;
    }
    *p++ = (uint8_t)raw;
    return p;
}

/* A key or value: its bytes and length, -1 for None.  0 with TypeError set for anything else. */
static inline int bytes_of(PyObject *item, const char **at, Py_ssize_t *length, const char *what, Py_ssize_t index)
{
    if (item == Py_None) {
        *at = NULL;
        *length = -1;
        return 1;
    }
    if (!PyBytes_Check(item)) {
        PyErr_Format(PyExc_TypeError, "%s %zd is %.100s, not bytes or None", what, index, Py_TYPE(item)->tp_name);
        return 0;
    }
    *at = PyBytes_AS_STRING(item);
    *length = PyBytes_GET_SIZE(item);
    return 1;
}

/* The body of record `delta` (everything after its length prefix) without headers. */
static inline Py_ssize_t body_size(int64_t ts_delta, int64_t delta, Py_ssize_t key_length, Py_ssize_t value_length)
{
    return 1 + zigzag_size(ts_delta) + zigzag_size(delta) + zigzag_size(key_length) + (key_length > 0 ? key_length : 0)
        + zigzag_size(value_length) + (value_length > 0 ? value_length : 0);
}

PyDoc_STRVAR(encode_v2_doc,
"encode_v2(values, keys, headers, start, stop, first_delta, ts_delta, max_bytes, max_count, max_record)\n"
"    -> (bytes, next)\n\n"
"Records values[start:stop] (a list or tuple of bytes or None) as v2 records, one after the other:\n"
"keys a list/tuple of the same length, or one bytes/None key for all; headers the encoded header\n"
"count and headers every record carries; offset deltas from first_delta, every timestamp delta\n"
"ts_delta.  Stops before the record that would make the bytes more than max_bytes (the first one\n"
"is taken anyway when first_delta is 0), after max_count records, and before a record of more\n"
"than max_record bytes.  next: the index of the first record not taken.");

/* Where encode_v2's values come from: Python objects (items), or the spans of one buffer
 * (encode_v2_spans: value i is data[starts[i]:starts[i + 1] - gap]). */
typedef struct {
    PyObject **items;
    const char *data;
    const int64_t *starts;
    Py_ssize_t gap;
} value_source;

static inline int value_of(const value_source *src, Py_ssize_t i, const char **at, Py_ssize_t *length)
{
    if (src->items != NULL)
        return bytes_of(src->items[i], at, length, "value", i);
    *at = src->data + src->starts[i];
    *length = (Py_ssize_t)(src->starts[i + 1] - src->starts[i]) - src->gap;
    return 1;
}

static PyObject *encode_values(const value_source *src, Py_ssize_t n, PyObject *keys, Py_buffer *headers,
                               Py_ssize_t start, Py_ssize_t stop, long long first_delta, long long ts_delta,
                               Py_ssize_t max_bytes, Py_ssize_t max_count, Py_ssize_t max_record);

static PyObject *encode_v2(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *values, *keys;
    Py_buffer headers;
    Py_ssize_t start, stop, max_bytes, max_count, max_record;
    long long first_delta, ts_delta;
    if (!PyArg_ParseTuple(args, "OOy*nnLLnnn", &values, &keys, &headers, &start, &stop, &first_delta, &ts_delta,
                          &max_bytes, &max_count, &max_record))
        return NULL;
    PyObject *result = NULL;
    PyObject *value_seq = PySequence_Fast(values, "values must be a list or tuple");
    if (value_seq != NULL) {
        value_source src = {PySequence_Fast_ITEMS(value_seq), NULL, NULL, 0};
        result = encode_values(&src, PySequence_Fast_GET_SIZE(value_seq), keys, &headers, start, stop, first_delta,
                               ts_delta, max_bytes, max_count, max_record);
        Py_DECREF(value_seq);
    }
    PyBuffer_Release(&headers);
    return result;
}

PyDoc_STRVAR(encode_v2_spans_doc,
"encode_v2_spans(data, starts, gap, keys, headers, start, stop, first_delta, ts_delta, max_bytes, max_count,\n"
"                max_record) -> (bytes, next)\n\n"
"encode_v2 of values that are spans of one buffer: value i is data[starts[i]:starts[i + 1] - gap],\n"
"starts a buffer of native int64 (one more than the values; delimited_starts makes it for records\n"
"that each end with a delimiter of gap bytes).  No value is null.  The rest as encode_v2.");

static PyObject *encode_v2_spans(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *keys;
    Py_buffer data, starts, headers;
    Py_ssize_t gap, start, stop, max_bytes, max_count, max_record;
    long long first_delta, ts_delta;
    if (!PyArg_ParseTuple(args, "y*y*nOy*nnLLnnn", &data, &starts, &gap, &keys, &headers, &start, &stop,
                          &first_delta, &ts_delta, &max_bytes, &max_count, &max_record))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t) - 1;
    const int64_t *at = (const int64_t *)starts.buf;
    if (n < 0 || starts.len % (Py_ssize_t)sizeof(int64_t) != 0 || gap < 0) {
        PyErr_SetString(PyExc_ValueError, "starts must hold one int64 more than the values, gap >= 0");
        goto done;
    }
    /* Every span inside data and not negative: checked once here, so the encoder may trust them. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (at[i] < 0 || at[i + 1] - gap < at[i] || at[i + 1] - gap > data.len) {
            PyErr_Format(PyExc_ValueError, "span %zd is not inside the data", i);
            goto done;
        }
    }
    value_source src = {NULL, (const char *)data.buf, at, gap};
    result = encode_values(&src, n, keys, &headers, start, stop, first_delta, ts_delta, max_bytes, max_count,
                           max_record);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&headers);
    return result;
}

PyDoc_STRVAR(delimited_starts_doc,
"delimited_starts(data, stop, delimiter) -> bytes\n\n"
"Where the records of data[:stop] that end with delimiter start (found from the left, as\n"
"bytes.split finds them): native int64s, one per record and then the end of the last one's\n"
"delimiter (where the rest, a record still to be completed, starts), for encode_v2_spans.");

static PyObject *delimited_starts(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, delim;
    Py_ssize_t stop;
    if (!PyArg_ParseTuple(args, "y*ny*", &data, &stop, &delim))
        return NULL;
    PyObject *out = NULL;
    const char *buf = (const char *)data.buf, *d = (const char *)delim.buf;
    Py_ssize_t dlen = delim.len;
    if (dlen < 1 || stop < 0 || stop > data.len) {
        PyErr_SetString(PyExc_ValueError, "an empty delimiter, or stop outside the data");
        goto done;
    }
    /* Pass 1 counts the records, pass 2 writes where each starts. */
    Py_ssize_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        int64_t *starts = pass ? (int64_t *)PyBytes_AS_STRING(out) : NULL;
        Py_ssize_t pos = 0, n = 0;
        while (pos < stop) {
            const char *hit = memchr(buf + pos, d[0], (size_t)(stop - pos));
            while (hit != NULL && dlen > 1 && (hit + dlen > buf + stop || memcmp(hit, d, (size_t)dlen) != 0))
                hit = memchr(hit + 1, d[0], (size_t)(buf + stop - hit - 1));
            if (hit == NULL)
                break;
            if (starts != NULL)
                starts[n] = pos;
            n++;
            pos = (hit - buf) + dlen;
        }
        if (starts != NULL) {
            starts[n] = pos;
        } else {
            count = n;
            out = PyBytes_FromStringAndSize(NULL, (count + 1) * (Py_ssize_t)sizeof(int64_t));
            if (out == NULL)
                goto done;
        }
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&delim);
    return out;
}

static PyObject *encode_values(const value_source *src, Py_ssize_t n, PyObject *keys, Py_buffer *headers_buf,
                               Py_ssize_t start, Py_ssize_t stop, long long first_delta, long long ts_delta,
                               Py_ssize_t max_bytes, Py_ssize_t max_count, Py_ssize_t max_record)
{
    Py_buffer headers = *headers_buf;
    PyObject *result = NULL, *key_seq = NULL;
    PyObject **key_items = NULL;
    const char *one_key = NULL;
    Py_ssize_t one_key_length = -1;
    if (PyList_Check(keys) || PyTuple_Check(keys)) {
        key_seq = PySequence_Fast(keys, "keys must be a list or tuple");
        if (key_seq == NULL)
            goto done;
        if (PySequence_Fast_GET_SIZE(key_seq) != n) {
            PyErr_Format(PyExc_ValueError, "%zd keys for %zd values", PySequence_Fast_GET_SIZE(key_seq), n);
            goto done;
        }
        key_items = PySequence_Fast_ITEMS(key_seq);
    } else if (!bytes_of(keys, &one_key, &one_key_length, "key", 0)) {
        goto done;
    }
    if (start < 0 || stop > n || start > stop) {
        PyErr_Format(PyExc_ValueError, "records %zd..%zd of %zd", start, stop, n);
        goto done;
    }
    /* Pass 1: how many records fit, and their bytes. */
    Py_ssize_t total = 0, i = start;
    int64_t delta = first_delta;
    for (; i < stop && i - start < max_count; i++, delta++) {
        const char *at = NULL;
        Py_ssize_t key_length = one_key_length, value_length = -1;
        if (!value_of(src, i, &at, &value_length))
            goto done;
        if (key_items != NULL && !bytes_of(key_items[i], &at, &key_length, "key", i))
            goto done;
        Py_ssize_t body = body_size(ts_delta, delta, key_length, value_length) + headers.len;
        Py_ssize_t size = zigzag_size(body) + body;
        if (size > max_record)
            break;
        if (total + size > max_bytes && !(i == start && first_delta == 0))
            break;
        total += size;
    }
    Py_ssize_t next = i;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    /* Pass 2: write them. */
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    delta = first_delta;
    for (i = start; i < next; i++, delta++) {
        const char *value = NULL, *key = one_key;
        Py_ssize_t key_length = one_key_length, value_length = -1;
        value_of(src, i, &value, &value_length);
        if (key_items != NULL)
            bytes_of(key_items[i], &key, &key_length, "key", i);
        Py_ssize_t body = body_size(ts_delta, delta, key_length, value_length) + headers.len;
        p = put_zigzag(p, body);
        *p++ = 0;  /* attributes */
        p = put_zigzag(p, ts_delta);
        p = put_zigzag(p, delta);
        p = put_zigzag(p, key_length);
        if (key_length > 0) {
            memcpy(p, key, (size_t)key_length);
            p += key_length;
        }
        p = put_zigzag(p, value_length);
        if (value_length > 0) {
            memcpy(p, value, (size_t)value_length);
            p += value_length;
        }
        memcpy(p, headers.buf, (size_t)headers.len);
        p += headers.len;
    }
    result = Py_BuildValue("(Nn)", out, next);
done:
    Py_XDECREF(key_seq);
    return result;
}

/* Java's Utils.murmur2 (MurmurHash2, seed 0x9747b28c), as an unsigned 32-bit value. */
static uint32_t murmur2(const uint8_t *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t words = length / 4;
    for (Py_ssize_t i = 0; i < words; i++) {
        const uint8_t *w = data + 4 * i;
        uint32_t k = (uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 | (uint32_t)w[3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = data + 4 * words;
    switch (length & 3) {  /* the trailing bytes, as Java's fall-through switch */
    case 3: h ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: h ^= (uint32_t)tail[0];
            h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

PyDoc_STRVAR(murmur2_partitions_doc,
"murmur2_partitions(keys, partitions) -> list[int] | None\n\n"
"Each key's partition as the Java client gives it: (murmur2(key) & 0x7fffffff) % partitions.\n"
"None when a key is not bytes (the caller decides what such a key means).");

static PyObject *murmur2_partitions(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *keys;
    Py_ssize_t partitions;
    if (!PyArg_ParseTuple(args, "On", &keys, &partitions))
        return NULL;
    if (partitions < 1) {
        PyErr_SetString(PyExc_ValueError, "partitions must be at least 1");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(keys, "keys must be a list or tuple");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_Check(items[i])) {
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
    }
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        uint32_t h = murmur2((const uint8_t *)PyBytes_AS_STRING(items[i]), PyBytes_GET_SIZE(items[i]));
        PyObject *p = PyLong_FromLong((long)((h & 0x7fffffffu) % (uint32_t)partitions));
        if (p == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, p);
    }
    Py_DECREF(seq);
    return out;
}

/* CRC-32C (Castagnoli), the checksum of v2 record batches, with the CPU's crc32 instruction
 * (SSE4.2).  kwire.protocol.records.crc uses it where the CPU has the instruction, and the
 * crc32c package otherwise: that package's import reads the metadata of every installed package
 * (importlib.metadata), a tenth of a second of every command's start. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define KWIRE_CRC32C_HW 1

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = _mm_crc32_u8(crc, *p++);
        n--;
    }
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    while (n--)
        crc = _mm_crc32_u8(crc, *p++);
    return ~crc;
}
#endif

PyDoc_STRVAR(crc32c_hardware_doc,
"crc32c_hardware() -> bool\n\n"
"Whether crc32c() can run here (an x86-64 CPU with SSE4.2, and a build that uses it).");

static PyObject *crc32c_hardware(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
#ifdef KWIRE_CRC32C_HW
    __builtin_cpu_init();
    return PyBool_FromLong(__builtin_cpu_supports("sse4.2"));
#else
    Py_RETURN_FALSE;
#endif
}

PyDoc_STRVAR(crc32c_doc,
"crc32c(data, value=0) -> int\n\n"
"The CRC-32C of data, continuing from value (the CRC of what came before), as crc32c.crc32c.\n"
"Only where crc32c_hardware() is true.");

static PyObject *crc32c_compute(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &data, &value))
        return NULL;
#ifdef KWIRE_CRC32C_HW
    uint32_t crc;
    if (data.len > 65536) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32c_sse42(value, (const uint8_t *)data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c_sse42(value, (const uint8_t *)data.buf, (size_t)data.len);
    }
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
#else
    PyBuffer_Release(&data);
    PyErr_SetString(PyExc_RuntimeError, "this build of _layout has no crc32c (no SSE4.2)");
    return NULL;
#endif
}

static PyMethodDef layout_methods[] = {
    {"scan_v2", scan_v2, METH_VARARGS, scan_v2_doc},
    {"gather", gather, METH_VARARGS, gather_doc},
    {"pack", pack, METH_VARARGS, pack_doc},
    {"map_put_v2", map_put_v2, METH_VARARGS, map_put_v2_doc},
    {"map_keep_v2", map_keep_v2, METH_VARARGS, map_keep_v2_doc},
    {"map_rehash", map_rehash, METH_VARARGS, map_rehash_doc},
    {"map_bitmap", map_bitmap, METH_VARARGS, map_bitmap_doc},
    {"key_digest", md5_digest, METH_VARARGS, md5_digest_doc},
    {"encode_v2", encode_v2, METH_VARARGS, encode_v2_doc},
    {"encode_v2_spans", encode_v2_spans, METH_VARARGS, encode_v2_spans_doc},
    {"delimited_starts", delimited_starts, METH_VARARGS, delimited_starts_doc},
    {"murmur2_partitions", murmur2_partitions, METH_VARARGS, murmur2_partitions_doc},
    {"crc32c_hardware", crc32c_hardware, METH_NOARGS, crc32c_hardware_doc},
    {"crc32c", crc32c_compute, METH_VARARGS, crc32c_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef layout_module = {
    PyModuleDef_HEAD_INIT,
    "kwire.protocol.records._layout",
    "Where the fields of v2 records lie, in one compiled pass (optional: kwire falls back to Python).",
    -1,
    layout_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__layout(void)
{
    for (int i = 0; i < 64; i++)  /* MD5's table: the integer part of |sin(i + 1)| * 2**32 */
        md5_k[i] = (uint32_t)(fabs(sin((double)(i + 1))) * 4294967296.0);
    return PyModule_Create(&layout_module);
}
