/* Where every field of the records of a v2 record batch lies: an optional compiled helper.
 *
 * A v2 record says where the next one starts only through its own length prefix, so finding
 * the records of a batch is a sequential walk: about 90 ns a record in CPython, and the one
 * step of reading records column-wise (kwire.spark.columns) that numpy cannot do.  This module
 * does the walk and reads every record's fields on the way, in one pass (about 20 ns a 100 B
 * record, call included); the caller builds columns from what it writes.  It also lays the
 * values of records out one after the other where they lie (`pack`), for a values column that
 * needs no buffer of its own.  kwire works without it: columns.py falls back to a Python walk
 * and numpy, with the same results (the tests compare the two).
 *
 * Layout of a record (Kafka's v2 message format): length varint, attributes int8, timestamp
 * delta varlong, offset delta varint, key length varint, key, value length varint, value,
 * header count varint, headers.  Varints are zigzag-encoded; a negative key or value length is
 * a null key or value.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
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

/* The records of one batch: `count` records from `buf[pos]` exactly to `buf[stop]`.  Fills
 * column `row + i` of `out` for record i.  Returns -1 if every record parses, else the index of
 * the first record that does not (`count` if the records end short of `stop`). */
static Py_ssize_t scan_records(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t stop, Py_ssize_t count,
                               int64_t *out, Py_ssize_t stride, Py_ssize_t row)
{
    const uint8_t *limit = buf + stop;
    const uint8_t *p = buf + pos;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, key_length, value_length, header_count;
        int used = read_varint(p, limit, 5, &length);
        if (!used || length < 0 || length > limit - (p + used))
            return i;
        p += used;
        const uint8_t *end = p + length;
        if (p >= end)
            return i;
        /* The walk waits on memory at every record (where the next one starts is known only
         * here), and records that just came off the network are rarely in this core's cache.
         * Records of one batch are usually of about one size: ask for the start of the record
         * eight ahead now.  Halves the walk's time over 1 KiB records (a prefetch never
         * faults, so a wrong guess costs nothing but the request). */
        Py_ssize_t ahead = (end - buf) + 8 * (end - (p - used));
        if (ahead < stop)
            __builtin_prefetch(buf + ahead, 0, 3);
        p += 1;  /* attributes: unused since Kafka 0.11 */
        if (!(used = read_varint(p, end, 10, &ts_delta)))
            return i;
        p += used;
        if (!(used = read_varint(p, end, 5, &off_delta)))
            return i;
        p += used;
        const uint8_t *key, *value;
        if (!read_bytes(&p, end, &key, &key_length) || !read_bytes(&p, end, &value, &value_length))
            return i;
        if (!(used = read_varint(p, end, 5, &header_count)) || header_count < 0)
            return i;
        p += used;
        /* A record without headers ends right here; one with headers has them parsed by the
         * caller, which checks that they end where the record does. */
        if (header_count == 0 && p != end)
            return i;
        int64_t *column = out + row + i;
        column[F_TIMESTAMP_DELTA * stride] = ts_delta;
        column[F_OFFSET_DELTA * stride] = off_delta;
        column[F_KEY_AT * stride] = key - buf;
        column[F_KEY_LENGTH * stride] = key_length;
        column[F_VALUE_AT * stride] = value - buf;
        column[F_VALUE_LENGTH * stride] = value_length;
        column[F_HEADER_COUNT * stride] = header_count;
        column[F_HEADERS_AT * stride] = p - buf;
        column[F_END * stride] = end - buf;
        p = end;
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

static PyMethodDef layout_methods[] = {
    {"scan_v2", scan_v2, METH_VARARGS, scan_v2_doc},
    {"gather", gather, METH_VARARGS, gather_doc},
    {"pack", pack, METH_VARARGS, pack_doc},
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
    return PyModule_Create(&layout_module);
}
