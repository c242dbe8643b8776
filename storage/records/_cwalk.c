/* The record walk of storage/records/validation.py, compiled: one C loop over a batch's records.
 *
 * Kafka's leader walks every record of a batch before it appends it (LogValidator); in Python
 * that walk is sequential over varints and is the top frame of a produce. walk_records here has
 * exactly the contract of storage/records/walk_vector.py's: it returns the largest timestamp
 * delta when every check of the record-by-record walk (validation._walk) holds, and None
 * otherwise, so that _walk runs and names the record and what was wrong. It decides nothing the
 * Python walk would not: tests/unit/storage/records/test_cwalk.py compares the two on valid,
 * broken and fuzzed batches.
 *
 * Every read is bounded: by the record area for a record's length, by the record's declared end
 * for its fields. A field read past the record's end is refused at once; the Python walk refuses
 * the same record later (positions only grow and a record must end exactly at its declared
 * end), so the answers agree. No copy: the area is read through the buffer protocol.
 *
 * plain_fields, the second function, serves the Spark source's reads (spark/arrow_decode.py):
 * the fields of records without headers, for numpy to build Arrow columns from, with the same
 * answers as that module's numpy walk (tests/unit/spark/test_arrow_decode.py compares them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A varint of at most max_bytes bytes (5 for an int32, 10 for an int64) at *pos, not running
 * past limit; its raw (still zig-zagged) value in *raw. 0 when it runs past limit, is longer
 * than max_bytes or does not fit its type (raw above 2**32-1, or above 2**64-1), as
 * varint.decode_varint/decode_varlong refuse it. */
static inline int
read_varint(const uint8_t *data, Py_ssize_t *pos, Py_ssize_t limit, int max_bytes,
            uint64_t *raw)
{
    Py_ssize_t p = *pos;
    uint64_t value = 0;
    int k;
    for (k = 0; k < max_bytes; k++) {
        uint8_t b;
        if (p >= limit) {
            return 0;
        }
        b = data[p++];
        if (k == max_bytes - 1) {
            /* The last byte allowed: it must end the varint and keep the value in range. */
            if (b >= 0x80 || (max_bytes == 5 && b > 0x0F) || (max_bytes == 10 && b > 0x01)) {
                return 0;
            }
        }
        value |= (uint64_t)(b & 0x7F) << (7 * k);
        if (b < 0x80) {
            *pos = p;
            *raw = value;
            return 1;
        }
    }
    return 0; /* unreachable: the last byte returns above */
}

static inline int64_t
unzigzag(uint64_t z)
{
    return (int64_t)((z >> 1) ^ (~(z & 1) + 1));
}

/* A Python int held to int64, with the side it overflowed on (-1, 0 or 1); -1 with an error
 * set when it is not an int. */
static int
clamped_int64(PyObject *obj, const char *name, int64_t *value, int *overflow)
{
    long long v;
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    v = PyLong_AsLongLongAndOverflow(obj, overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (*overflow > 0) {
        v = INT64_MAX;
    }
    else if (*overflow < 0) {
        v = INT64_MIN;
    }
    *value = (int64_t)v;
    return 0;
}

/* Whether the n bytes at p are UTF-8 as Python's strict decoder reads it (a header key). */
static int
is_utf8(const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t i;
    PyObject *text;
    for (i = 0; i < n; i++) {
        if (p[i] >= 0x80) {
            break;
        }
    }
    if (i == n) {
        return 1;
    }
    text = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(text);
    return 1;
}

/* The headers of a record at *pos (validation's columns.decode_headers): a count, then each
 * key (UTF-8, not null) and value (null or fitting). 0 for any fault. */
static int
walk_headers(const uint8_t *data, Py_ssize_t *pos, Py_ssize_t rec_end)
{
    Py_ssize_t p = *pos;
    uint64_t z;
    int64_t count, n, i;
    if (!read_varint(data, &p, rec_end, 5, &z)) {
        return 0;
    }
    count = unzigzag(z);
    if (count < 0 || count > rec_end - p) {
        return 0;
    }
    for (i = 0; i < count; i++) {
        if (!read_varint(data, &p, rec_end, 5, &z)) {
            return 0;
        }
        n = unzigzag(z);
        if (n < 0 || n > rec_end - p || !is_utf8(data + p, (Py_ssize_t)n)) {
            return 0;
        }
        p += (Py_ssize_t)n;
        if (!read_varint(data, &p, rec_end, 5, &z)) {
            return 0;
        }
        n = unzigzag(z);
        if (n >= 0) {
            if (n > rec_end - p) {
                return 0;
            }
            p += (Py_ssize_t)n;
        }
    }
    *pos = p;
    return 1;
}

typedef struct {
    int64_t last_delta;
    int dense;
    int compacted;
    int64_t low, high;   /* the timestamp delta bounds, held to int64 ... */
    int low_ovf, high_ovf; /* ... and the side each overflowed on */
    int64_t unset;       /* the delta of a record without timestamp (-1 - base_ts) */
    int has_unset;       /* 0 when base_ts lies outside int64: no delta reaches -1 */
} Checks;

/* The walk; 1 with the largest timestamp delta in *max_delta when every record passes. */
static int
walk(const uint8_t *data, Py_ssize_t end, Py_ssize_t count, const Checks *c, int64_t *max_delta)
{
    Py_ssize_t pos = 0, index;
    int64_t prev = -1, best = INT64_MIN;
    uint64_t z;
    for (index = 0; index < count; index++) {
        Py_ssize_t rec_end;
        int64_t length, ts_delta;
        if (!read_varint(data, &pos, end, 5, &z)) {
            return 0;
        }
        length = unzigzag(z);
        if (length <= 0 || length > end - pos) {
            return 0;
        }
        rec_end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes: unused in v2 */
        if (!read_varint(data, &pos, rec_end, 10, &z)) {
            return 0;
        }
        ts_delta = unzigzag(z);
        if (ts_delta > best) {
            best = ts_delta;
        }
        if ((c->low_ovf > 0 || c->high_ovf < 0 || (c->low_ovf == 0 && ts_delta < c->low) ||
             (c->high_ovf == 0 && ts_delta > c->high)) &&
            !(c->has_unset && ts_delta == c->unset)) {
            return 0;
        }
        if (!read_varint(data, &pos, rec_end, 5, &z)) {
            return 0;
        }
        if (c->dense) {
            if (z != (uint64_t)index << 1) {
                return 0;
            }
        }
        else {
            int64_t delta = unzigzag(z);
            if (delta <= prev || delta > c->last_delta) {
                return 0;
            }
            prev = delta;
        }
        if (!read_varint(data, &pos, rec_end, 5, &z)) { /* key length */
            return 0;
        }
        if (z & 1) {
            if (c->compacted) {
                return 0;
            }
        }
        else {
            if ((int64_t)(z >> 1) > rec_end - pos) {
                return 0;
            }
            pos += (Py_ssize_t)(z >> 1);
        }
        if (!read_varint(data, &pos, rec_end, 5, &z)) { /* value length */
            return 0;
        }
        if (!(z & 1)) {
            if ((int64_t)(z >> 1) > rec_end - pos) {
                return 0;
            }
            pos += (Py_ssize_t)(z >> 1);
        }
        if (pos >= rec_end) {
            return 0; /* no room for the header count */
        }
        if (data[pos] == 0) {
            pos += 1;
        }
        else if (!walk_headers(data, &pos, rec_end)) {
            return 0;
        }
        if (pos != rec_end) {
            return 0;
        }
    }
    if (pos != end) {
        return 0;
    }
    *max_delta = best;
    return 1;
}

#define WALK_ARGS 8
static const char *const walk_keywords[WALK_ARGS] = {
    "data", "count", "last_delta", "dense", "compacted", "base_ts", "low", "high"};

/* The arguments by position or by name into slots[0..7], each exactly once (METH_FASTCALL:
 * validation calls with eight positional arguments on every append, and the keyword parsing
 * of PyArg_ParseTupleAndKeywords, a dict built per call, cost about what a small batch's walk
 * does; the other walks' callers still pass the checks by name). -1 with TypeError set. */
static int
walk_arguments(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **slots)
{
    Py_ssize_t i, k, nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (k = 0; k < WALK_ARGS; k++) {
        slots[k] = NULL;
    }
    if (nargs > WALK_ARGS) {
        PyErr_Format(PyExc_TypeError, "walk_records() takes at most %d arguments (%zd given)",
                     WALK_ARGS, nargs);
        return -1;
    }
    for (i = 0; i < nargs; i++) {
        slots[i] = args[i];
    }
    for (i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        for (k = 0; k < WALK_ARGS; k++) {
            if (PyUnicode_CompareWithASCIIString(name, walk_keywords[k]) == 0) {
                break;
            }
        }
        if (k == WALK_ARGS) {
            PyErr_Format(PyExc_TypeError, "walk_records() got an unexpected keyword argument '%U'",
                         name);
            return -1;
        }
        if (slots[k] != NULL) {
            PyErr_Format(PyExc_TypeError, "walk_records() got multiple values for argument '%s'",
                         walk_keywords[k]);
            return -1;
        }
        slots[k] = args[nargs + i];
    }
    for (k = 0; k < WALK_ARGS; k++) {
        if (slots[k] == NULL) {
            PyErr_Format(PyExc_TypeError, "walk_records() missing required argument '%s'",
                         walk_keywords[k]);
            return -1;
        }
    }
    return 0;
}

static PyObject *
cwalk_walk_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *slots[WALK_ARGS];
    Py_buffer view;
    int dense, compacted, ovf, found;
    int64_t count, base_ts, max_delta = 0;
    Checks c;
    (void)self;
    if (walk_arguments(args, nargs, kwnames, slots) < 0) {
        return NULL;
    }
    /* As PyArg_Parse's "p": any object's truth. */
    dense = PyObject_IsTrue(slots[3]);
    compacted = PyObject_IsTrue(slots[4]);
    if (dense < 0 || compacted < 0) {
        return NULL;
    }
    /* As PyArg_Parse's "y*": a contiguous bytes-like object, never a str. */
    if (PyUnicode_Check(slots[0])) {
        PyErr_SetString(PyExc_TypeError, "data must be a bytes-like object, not 'str'");
        return NULL;
    }
    if (PyObject_GetBuffer(slots[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    c.dense = dense;
    c.compacted = compacted;
    if (clamped_int64(slots[1], "count", &count, &ovf) < 0 ||
        clamped_int64(slots[2], "last_delta", &c.last_delta, &ovf) < 0 ||
        clamped_int64(slots[5], "base_ts", &base_ts, &ovf) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* -1 - base_ts stays within int64 for every int64 base_ts; outside it, no int64 delta
     * gives a timestamp of -1. */
    c.has_unset = ovf == 0;
    c.unset = -1 - base_ts;
    if (clamped_int64(slots[6], "low", &c.low, &c.low_ovf) < 0 ||
        clamped_int64(slots[7], "high", &c.high, &c.high_ovf) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* Every record takes at least one byte, so a count above the area's size fails anyway;
     * no record count (the walk answers) for an empty batch. */
    found = count > 0 && count <= view.len &&
            walk((const uint8_t *)view.buf, view.len, (Py_ssize_t)count, &c, &max_delta);
    PyBuffer_Release(&view);
    if (!found) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong((long long)max_delta);
}

/* The fields of records without headers, for the Spark source's reads
 * (spark/arrow_decode.py's _record_positions and _record_fields, which it replaces where it is
 * built): for each payload j, counts[j] records filling data[begins[j], ends[j]) exactly, each
 * with a length (not negative), an attributes byte, a timestamp delta (a varlong), an offset
 * delta, a key and a value (a negative length is null) and a header count of 0. Their
 * timestamp deltas, offset deltas, key starts, key lengths, value starts and value lengths go
 * to out, six rows of n = sum(counts) int64 each. 1 when every record is so; 0 as soon as one
 * is not (a record with headers, or any fault: the walks of the Python path decide then). */
static int
plain_fields(const uint8_t *data, Py_ssize_t size, const int64_t *begins, const int64_t *ends,
             const int64_t *counts, Py_ssize_t spans, int64_t *out, Py_ssize_t n)
{
    Py_ssize_t j, k = 0;
    uint64_t z;
    for (j = 0; j < spans; j++) {
        Py_ssize_t p, end;
        int64_t i;
        if (begins[j] < 0 || ends[j] > size || begins[j] > ends[j] || counts[j] < 0 ||
            counts[j] > n - k) {
            return 0;
        }
        p = (Py_ssize_t)begins[j];
        end = (Py_ssize_t)ends[j];
        for (i = 0; i < counts[j]; i++, k++) {
            Py_ssize_t rec_end, key_end, headers_at;
            int64_t length, key_len, value_len;
            if (p >= end || !read_varint(data, &p, end, 5, &z)) {
                return 0;
            }
            length = unzigzag(z);
            if (length < 0 || length > end - p) {
                return 0;
            }
            rec_end = p + (Py_ssize_t)length;
            p += 1; /* attributes */
            if (p > rec_end || !read_varint(data, &p, rec_end, 10, &z)) {
                return 0;
            }
            out[k] = unzigzag(z);
            if (!read_varint(data, &p, rec_end, 5, &z)) {
                return 0;
            }
            out[n + k] = unzigzag(z);
            if (!read_varint(data, &p, rec_end, 5, &z)) {
                return 0;
            }
            key_len = unzigzag(z);
            key_end = p + (Py_ssize_t)(key_len > 0 ? key_len : 0);
            if (key_len > rec_end - p || key_end >= rec_end) {
                return 0;
            }
            out[2 * n + k] = p;
            out[3 * n + k] = key_len;
            p = key_end;
            if (!read_varint(data, &p, rec_end, 5, &z)) {
                return 0;
            }
            value_len = unzigzag(z);
            headers_at = p + (Py_ssize_t)(value_len > 0 ? value_len : 0);
            if (value_len > rec_end - p || headers_at + 1 != rec_end || data[headers_at] != 0) {
                return 0;
            }
            out[4 * n + k] = p;
            out[5 * n + k] = value_len;
            p = rec_end;
        }
        if (p != end) {
            return 0;
        }
    }
    return k == n;
}

/* A read-only buffer of int64 (a C-contiguous numpy array of them), its length in *count. */
static int
int64_buffer(PyObject *obj, const char *name, Py_buffer *view, Py_ssize_t *count)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return -1;
    }
    if (view->itemsize != 8 || view->format == NULL ||
        (strcmp(view->format, "q") != 0 && strcmp(view->format, "l") != 0 &&
         strcmp(view->format, "<q") != 0 && strcmp(view->format, "<l") != 0 &&
         strcmp(view->format, "=q") != 0 && strcmp(view->format, "=l") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s must be a buffer of int64", name);
        PyBuffer_Release(view);
        return -1;
    }
    *count = view->len / 8;
    return 0;
}

static PyObject *
cwalk_plain_fields(PyObject *self, PyObject *args)
{
    /* begins, ends, counts, out: int64 buffers, held in views[0..held-1] */
    static const char *const names[4] = {"begins", "ends", "counts", "out"};
    PyObject *data_obj, *objs[4];
    Py_buffer data, views[4];
    Py_ssize_t lengths[4];
    int found = 0, held;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOO:plain_fields", &data_obj, &objs[0], &objs[1], &objs[2],
                          &objs[3])) {
        return NULL;
    }
    if (PyUnicode_Check(data_obj)) {
        PyErr_SetString(PyExc_TypeError, "data must be a bytes-like object, not 'str'");
        return NULL;
    }
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    for (held = 0; held < 4; held++) {
        if (int64_buffer(objs[held], names[held], &views[held], &lengths[held]) < 0) {
            goto done;
        }
    }
    if (views[3].readonly) {
        PyErr_SetString(PyExc_TypeError, "out must be writable");
    }
    else if (lengths[1] != lengths[0] || lengths[2] != lengths[0] || lengths[3] % 6 != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "begins, ends and counts must be of one length, out of six rows");
    }
    else {
        found = plain_fields((const uint8_t *)data.buf, data.len, (const int64_t *)views[0].buf,
                             (const int64_t *)views[1].buf, (const int64_t *)views[2].buf,
                             lengths[0], (int64_t *)views[3].buf, lengths[3] / 6);
    }
done:
    while (held > 0) {
        PyBuffer_Release(&views[--held]);
    }
    PyBuffer_Release(&data);
    if (PyErr_Occurred()) {
        return NULL;
    }
    return PyBool_FromLong(found);
}

static PyMethodDef cwalk_methods[] = {
    {"walk_records", (PyCFunction)(void (*)(void))cwalk_walk_records,
     METH_FASTCALL | METH_KEYWORDS,
     "walk_records(data, count, last_delta, dense, compacted, base_ts, low, high)\n--\n\n"
     "The largest timestamp delta of count records filling data, if every record passes the "
     "record-by-record walk's checks; None to let that walk judge."},
    {"plain_fields", cwalk_plain_fields, METH_VARARGS,
     "plain_fields(data, begins, ends, counts, out)\n--\n\n"
     "The fields of the records without headers filling each payload [begins[j], ends[j]) "
     "of data (counts[j] records each), written to out (six rows of int64); False as soon as "
     "a record is not so."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef cwalk_module = {
    PyModuleDef_HEAD_INIT,
    "_cwalk",
    "The record walk of storage.records.validation, compiled (see _cwalk.c).",
    -1,
    cwalk_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__cwalk(void)
{
    return PyModule_Create(&cwalk_module);
}
