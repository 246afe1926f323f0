/* rldbg._api_c: the user API's recording hot paths (rldbg.span / instant / counter) in C.
 *
 * Why C: as Python functions these cannot meet their budgets. A `def span(name, /, **args)` that
 * only returns an existing object already costs more than the 100 ns an off span may cost (its
 * frame and the kwargs dict), and a traced span spent most of its 800 ns in Python frames and
 * attribute lookups. Here an off span is one C call that reads a C flag and a dict; a traced one
 * builds the same event tuple rldbg.api's Python code builds, without a Python frame.
 *
 * This module owns no behaviour of its own: rldbg.api keeps the Python implementation and binds
 * it here (bind()); every case this file does not handle on its fast path (a bad name, a first
 * lookup of the collector, a full check of counter values that fails, decorating) calls that
 * Python code, so messages and semantics live in one place. The event layout is
 * rldbg.trace.events' (SLICE/INSTANT/COUNTER tuples of 11 fields); tests compare both.
 *
 * StateBase holds the flags every hot path reads (on, looked_up, recorder) as C fields:
 * rldbg.trace.runtime's process state subclasses it, so Python reads them as before.
 *
 * Held events and the cyclic GC: a tuple holding a dict stays tracked by CPython's GC forever (a
 * dict "may become" tracked), so with 100k+ events buffered every full collection walks them all;
 * that made a traced counter cost 1.3 us instead of 0.6. An event whose fields are all atomic (or
 * an untracked dict: only atomic keys and values) cannot be part of a cycle, so it is untracked
 * here at creation. Nothing mutates an event after it is built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

/* ---- the process's tracing flags ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    char on;
    char looked_up;
    PyObject *recorder;   /* NULL reads as None */
    double last_lookup;   /* time.monotonic() of the last look for a collector */
} StateBase;

static int state_traverse(StateBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->recorder);
    return 0;
}

static int state_clear(StateBase *self) {
    Py_CLEAR(self->recorder);
    return 0;
}

static void state_dealloc(StateBase *self) {
    PyObject_GC_UnTrack(self);
    state_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef state_members[] = {
    {"on", T_BOOL, offsetof(StateBase, on), 0, "tracing records in this process"},
    {"looked_up", T_BOOL, offsetof(StateBase, looked_up), 0, "this process looked for a collector"},
    {"recorder", T_OBJECT, offsetof(StateBase, recorder), 0, "the Recorder events go to, or None"},
    {"last_lookup", T_DOUBLE, offsetof(StateBase, last_lookup), 0, "time.monotonic() of the last lookup"},
    {NULL}
};

static PyTypeObject StateBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rldbg._api_c.StateBase",
    .tp_basicsize = sizeof(StateBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Tracing flags read by the C hot paths (subclassed by rldbg.trace.runtime).",
    .tp_traverse = (traverseproc)state_traverse,
    .tp_clear = (inquiry)state_clear,
    .tp_dealloc = (destructor)state_dealloc,
    .tp_members = state_members,
    .tp_new = PyType_GenericNew,
};

/* ---- what bind() gives us ------------------------------------------------------------------- */

static StateBase *g_state;     /* rldbg.trace.runtime.STATE */
static PyObject *g_ctx;        /* rldbg.context.current() */
static PyObject *g_off;        /* rldbg.api._OFF: name -> shared off span */
static PyObject *g_py_span, *g_py_instant, *g_py_counter;   /* the Python implementations */
static PyObject *g_lookup;     /* rldbg.trace.runtime.lookup */
static PyObject *g_decorate;   /* rldbg.api._decorate(name, args, fn) */
static PyObject *g_clock;      /* None: CLOCK_REALTIME here; else a callable (tests skew it) */

static PyObject *s_flow_id, *s_buf, *s_capacity, *s_dropped, *s_append, *s_role, *s_rank, *s_step, *s_method,
    *s_error, *s_name, *s_kw_name, *s_X, *s_i, *s_C, *s_user;

#define READY() (g_state != NULL)

/* The Context's fields the C paths read and write, and where each lives in the object: the
 * Context is a slotted dataclass mutated in place on every call, so its fields are read and
 * written at their slot's offset (what its member descriptors do) when bind() finds plain slots
 * there; else (0) through getattr/setattr. */
static PyObject **g_ctx_keys[5] = {&s_role, &s_rank, &s_method, &s_step, &s_flow_id};
static Py_ssize_t g_ctx_off[5];

static inline PyObject **ctx_slot(PyObject *key) {
    for (int i = 0; i < 5; i++)
        if (*g_ctx_keys[i] == key)
            return g_ctx_off[i] ? (PyObject **)((char *)g_ctx + g_ctx_off[i]) : NULL;
    return NULL;
}

/* ctx.<key>, new reference. */
static PyObject *ctx_get(PyObject *key) {
    PyObject **slot = ctx_slot(key);
    if (slot != NULL && *slot != NULL)
        return Py_NewRef(*slot);
    return PyObject_GetAttr(g_ctx, key);   /* unset slot: AttributeError, as Python says it */
}

static int ctx_set(PyObject *key, PyObject *v) {
    PyObject **slot = ctx_slot(key);
    if (slot == NULL)
        return PyObject_SetAttr(g_ctx, key, v);
    Py_XSETREF(*slot, Py_NewRef(v));
    return 0;
}

/* Slot offsets of the context's fields where its type reads and writes them plainly. */
static void find_ctx_slots(PyObject *ctx) {
    PyTypeObject *tp = Py_TYPE(ctx);
    int plain = tp->tp_getattro == PyObject_GenericGetAttr && tp->tp_setattro == PyObject_GenericSetAttr;
    for (int i = 0; i < 5; i++) {
        g_ctx_off[i] = 0;
        PyObject *d = plain ? PyObject_GetAttr((PyObject *)tp, *g_ctx_keys[i]) : NULL;
        if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
                g_ctx_off[i] = m->offset;
        }
        Py_XDECREF(d);
        PyErr_Clear();
    }
}

/* time.time_ns() as a C integer: the same clock (CLOCK_REALTIME), read without a Python call (or
 * g_clock's answer where one is set). -1 with an exception set on error. */
static long long now_raw(void) {
#ifndef _WIN32
    if (g_clock == NULL) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
#endif
    PyObject *t = PyObject_CallNoArgs(g_clock);
    if (t == NULL)
        return -1;
    long long v = PyLong_AsLongLong(t);
    Py_DECREF(t);
    return v;
}

static inline PyObject *now_ns(void) {   /* kept for callers that want a Python int */
    long long v = now_raw();
    return v == -1 && PyErr_Occurred() ? NULL : PyLong_FromLongLong(v);
}

/* Untrack an event no cycle can go through (see the module comment). */
static void untrack_if_atomic(PyObject *tup) {
    Py_ssize_t n = PyTuple_GET_SIZE(tup);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(tup, i);
        if (v == Py_None || PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || !PyObject_IS_GC(v))
            continue;   /* the common atomic fields first, without a call */
        if ((PyDict_CheckExact(v) || PyTuple_CheckExact(v)) && !PyObject_GC_IsTracked(v))
            continue;
        return;
    }
    PyObject_GC_UnTrack(tup);
}

/* ---- events held packed ----------------------------------------------------------------------
 * An event the C paths record is held as the msgpack bytes the shipper would have made of its
 * tuple (an 11-element array: rldbg.trace.spill's record layout), not as the tuple: about 70 bytes
 * instead of about 200 (a tuple, two ints and a GC header), nothing for the cyclic GC to see, and
 * nothing left to pack when it ships (spill.encode_events splices such bytes in as they are).
 * rldbg.trace.events.decode() reads them back. An event with anything msgpack would need
 * Python for (args holding lists or objects, an int beyond 64 bits, a str with lone
 * surrogates, a large one) is held as the tuple, as before. */

typedef struct {
    unsigned char *p, *end;
} Packer;

#define PACK_MAX 512   /* larger events are held as tuples */

static inline int put(Packer *w, const void *src, size_t n) {
    if ((size_t)(w->end - w->p) < n)
        return -1;
    memcpy(w->p, src, n);
    w->p += n;
    return 0;
}

static inline int put1(Packer *w, unsigned char b) {
    return put(w, &b, 1);
}

static int put_be(Packer *w, unsigned char tag, unsigned long long v, int nbytes) {
    unsigned char b[9];
    b[0] = tag;
    for (int i = 0; i < nbytes; i++)
        b[1 + i] = (unsigned char)(v >> (8 * (nbytes - 1 - i)));
    return put(w, b, 1 + nbytes);
}

static int pack_int(Packer *w, long long v) {
    if (v >= 0) {
        if (v < 128) return put1(w, (unsigned char)v);
        if (v < 256) return put_be(w, 0xcc, v, 1);
        if (v < 65536) return put_be(w, 0xcd, v, 2);
        if (v <= 0xffffffffLL) return put_be(w, 0xce, v, 4);
        return put_be(w, 0xcf, v, 8);
    }
    if (v >= -32) return put1(w, (unsigned char)(0xe0 | (v + 32)));
    if (v >= -128) return put_be(w, 0xd0, (unsigned long long)v, 1);
    if (v >= -32768) return put_be(w, 0xd1, (unsigned long long)v, 2);
    if (v >= -2147483648LL) return put_be(w, 0xd2, (unsigned long long)v, 4);
    return put_be(w, 0xd3, (unsigned long long)v, 8);
}

static int pack_str(Packer *w, PyObject *s) {
    Py_ssize_t n;
    const char *u;
    if (PyUnicode_IS_COMPACT_ASCII(s)) {   /* the usual case: the bytes are right there */
        n = PyUnicode_GET_LENGTH(s);
        u = (const char *)PyUnicode_DATA(s);
    } else if (!(u = PyUnicode_AsUTF8AndSize(s, &n))) {
        PyErr_Clear();                      /* lone surrogates: msgpack's surrogatepass, in Python */
        return -1;
    }
    int rc;
    if (n < 32) rc = put1(w, (unsigned char)(0xa0 | n));
    else if (n < 256) rc = put_be(w, 0xd9, n, 1);
    else if (n < 65536) rc = put_be(w, 0xda, n, 2);
    else return -1;
    return rc < 0 ? -1 : put(w, u, n);
}

/* An atomic value as msgpack: None, bool, int (64 bits), float, str; -1 for anything else. */
static int pack_atom(Packer *w, PyObject *v) {
    if (v == Py_None) return put1(w, 0xc0);
    if (v == Py_True) return put1(w, 0xc3);
    if (v == Py_False) return put1(w, 0xc2);
    if (PyUnicode_CheckExact(v)) return pack_str(w, v);
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return -1;
        }
        return pack_int(w, x);
    }
    if (PyFloat_CheckExact(v)) {
        double d = PyFloat_AS_DOUBLE(v);
        unsigned long long bits;
        memcpy(&bits, &d, 8);
        return put_be(w, 0xcb, bits, 8);
    }
    return -1;
}

static int pack_args(Packer *w, PyObject *args) {
    if (args == NULL)
        return put1(w, 0xc0);
    Py_ssize_t n = PyDict_GET_SIZE(args), pos = 0;
    if (n >= 16)
        return -1;
    PyObject *k, *v;
    if (put1(w, (unsigned char)(0x80 | n)) < 0)
        return -1;
    while (PyDict_Next(args, &pos, &k, &v))
        if (!PyUnicode_CheckExact(k) || pack_str(w, k) < 0 || pack_atom(w, v) < 0)
            return -1;
    return 0;
}

/* (ph, "user", name, ts, dur, role, rank, step, method, None, args) with this process's context:
 * packed (see above) or, where it cannot be, the tuple. Steals args (NULL: None). */
static PyObject *user_event(PyObject *ph, PyObject *name, long long ts, long long dur, PyObject *args) {
    PyObject *role = NULL, *rank = NULL, *step = NULL, *method = NULL, *out = NULL;
    if (!(role = ctx_get(s_role)) || !(rank = ctx_get(s_rank)) || !(step = ctx_get(s_step))
        || !(method = ctx_get(s_method)))
        goto done;
    unsigned char mem[PACK_MAX];
    Packer w = {mem, mem + PACK_MAX};
    if (put1(&w, 0x9b) == 0 && pack_str(&w, ph) == 0 && pack_str(&w, s_user) == 0 && pack_str(&w, name) == 0
        && pack_int(&w, ts) == 0 && pack_int(&w, dur) == 0 && pack_atom(&w, role) == 0
        && pack_atom(&w, rank) == 0 && pack_atom(&w, step) == 0 && pack_atom(&w, method) == 0
        && put1(&w, 0xc0) == 0 && pack_args(&w, args) == 0) {
        out = PyBytes_FromStringAndSize((const char *)mem, w.p - mem);
        goto done;
    }
    PyObject *t = PyLong_FromLongLong(ts), *d = t ? PyLong_FromLongLong(dur) : NULL;
    if (d == NULL || !(out = PyTuple_New(11))) {
        Py_XDECREF(t); Py_XDECREF(d);
        goto done;
    }
    PyObject *items[11] = {Py_NewRef(ph), Py_NewRef(s_user), Py_NewRef(name), t, d, role, rank, step, method,
                           Py_NewRef(Py_None), args ? args : Py_NewRef(Py_None)};
    for (int i = 0; i < 11; i++)
        PyTuple_SET_ITEM(out, i, items[i]);
    untrack_if_atomic(out);
    return out;   /* the tuple took role..method and args */
done:
    Py_XDECREF(args);
    Py_XDECREF(role); Py_XDECREF(rank); Py_XDECREF(step); Py_XDECREF(method);
    return out;
}

/* The recorder last emitted to, its buffer's bound append and its capacity: looked up once per
 * recorder, not per event (Recorder.buf and .capacity are set once, in Recorder.__init__). The
 * strong reference keeps the pointer comparison honest; it is dropped once tracing stops. */
static PyObject *c_rec, *c_buf, *c_append;
static Py_ssize_t c_cap;

static void forget_recorder(void) {
    Py_CLEAR(c_rec); Py_CLEAR(c_buf); Py_CLEAR(c_append);
}

static int cache_recorder(PyObject *rec) {
    PyObject *buf = PyObject_GetAttr(rec, s_buf), *cap = buf ? PyObject_GetAttr(rec, s_capacity) : NULL;
    PyObject *app = cap ? PyObject_GetAttr(buf, s_append) : NULL;
    Py_ssize_t c = app ? PyLong_AsSsize_t(cap) : -1;
    Py_XDECREF(cap);
    if (app == NULL || (c == -1 && PyErr_Occurred())) {
        Py_XDECREF(buf); Py_XDECREF(app);
        return -1;
    }
    forget_recorder();
    c_rec = Py_NewRef(rec); c_buf = buf; c_append = app; c_cap = c;
    return 0;
}

/* Recorder.emit, inlined as rldbg.api does: append while below capacity, else count a drop.
 * Steals ev. */
static int emit(PyObject *rec, PyObject *ev) {
    PyObject *r = NULL;
    if (ev == NULL)
        return -1;
    if (rec != c_rec && cache_recorder(rec) < 0) {
        Py_DECREF(ev);
        return -1;
    }
    Py_ssize_t n = PyObject_Size(c_buf);
    if (n < 0) {
        Py_DECREF(ev);
        return -1;
    }
    if (n < c_cap) {
        r = PyObject_CallOneArg(c_append, ev);
    } else {
        PyObject *d = PyObject_GetAttr(rec, s_dropped);
        if (d != NULL) {
            PyObject *one = PyLong_FromLong(1);
            r = one ? PyNumber_Add(d, one) : NULL;
            Py_XDECREF(one);
            Py_DECREF(d);
            if (r != NULL && PyObject_SetAttr(rec, s_dropped, r) < 0)
                Py_CLEAR(r);
        }
    }
    Py_DECREF(ev);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The recorder to emit to, borrowed; NULL when there is none. */
static inline PyObject *recorder(void) {
    PyObject *rec = g_state->recorder;
    if (rec == Py_None || rec == NULL) {
        if (c_rec != NULL)
            forget_recorder();   /* tracing stopped: let the old recorder go */
        return NULL;
    }
    return rec;
}

/* kwargs of a vectorcall as a new dict; NULL kwnames: NULL (no args), not an error. */
static PyObject *kwargs_dict(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int *err) {
    *err = 0;
    if (kwnames == NULL)
        return NULL;
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    PyObject *d = PyDict_New();
    if (d == NULL) {
        *err = 1;
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nk; i++) {
        if (PyDict_SetItem(d, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
            Py_DECREF(d);
            *err = 1;
            return NULL;
        }
    }
    return d;
}

/* ---- span ----------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *name;
    PyObject *args;       /* NULL: no args */
    long long t0;         /* 0: not recording this time */
} Span;

/* Not a GC type: a span lives for one `with`, and a cycle through its args would only leak it. */
static void span_dealloc(Span *self) {
    Py_DECREF(self->name);
    Py_XDECREF(self->args);
    PyObject_Free(self);
}

static PyObject *span_enter(Span *self, PyObject *unused) {
    /* As rldbg.api._Span.__enter__: on, or the first look for a collector finds one. */
    int on = g_state->on;
    if (!on && !g_state->looked_up) {
        PyObject *r = PyObject_CallNoArgs(g_lookup);
        if (r == NULL)
            return NULL;
        on = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (on < 0)
            return NULL;
    }
    self->t0 = 0;
    if (on && (self->t0 = now_raw()) == -1 && PyErr_Occurred())
        return NULL;
    return Py_NewRef(self);
}

static PyObject *span_exit(Span *self, PyObject *const *a, Py_ssize_t n) {
    PyObject *rec = recorder();
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "__exit__ takes 3 arguments");
        return NULL;
    }
    if (self->t0 == 0 || rec == NULL)
        Py_RETURN_FALSE;
    PyObject *args;
    if (a[0] == Py_None) {
        args = self->args && PyDict_GET_SIZE(self->args) ? Py_NewRef(self->args) : NULL;
    } else {   /* the span ends with an exception: dict(args, error=<type name>) */
        args = self->args ? PyDict_Copy(self->args) : PyDict_New();
        if (args == NULL)
            return NULL;
        PyObject *tn = PyObject_GetAttr(a[0], s_name);
        if (tn == NULL || PyDict_SetItem(args, s_error, tn) < 0) {
            Py_XDECREF(tn);
            Py_DECREF(args);
            return NULL;
        }
        Py_DECREF(tn);
    }
    long long t1 = now_raw();
    if (t1 == -1 && PyErr_Occurred()) {
        Py_XDECREF(args);
        return NULL;
    }
    long long dur = t1 - self->t0;
    Py_INCREF(rec);   /* getting the context may run Python code that detaches */
    int rc = emit(rec, user_event(s_X, self->name, self->t0, dur, args));
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_FALSE;
}

/* `@rldbg.span(...)` while tracing: the Python decorator (one span per call). */
static PyObject *span_call(Span *self, PyObject *args, PyObject *kw) {
    PyObject *fn;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "a span decorates one function");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "span", 1, 1, &fn))
        return NULL;
    PyObject *d = self->args ? Py_NewRef(self->args) : PyDict_New();
    if (d == NULL)
        return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(g_decorate, self->name, d, fn, NULL);
    Py_DECREF(d);
    return r;
}

static PyObject *span_get_args(Span *self, void *unused) {
    return self->args ? Py_NewRef(self->args) : PyDict_New();
}

static PyObject *span_get_t0(Span *self, void *unused) {
    return PyLong_FromLongLong(self->t0);
}

static PyMethodDef span_methods[] = {
    {"__enter__", (PyCFunction)span_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))span_exit, METH_FASTCALL, NULL},
    {NULL}
};

static PyMemberDef span_members[] = {
    {"name", T_OBJECT, offsetof(Span, name), READONLY, NULL},
    {NULL}
};

static PyGetSetDef span_getset[] = {
    {"args", (getter)span_get_args, NULL, NULL, NULL},
    {"t0", (getter)span_get_t0, NULL, NULL, NULL},
    {NULL}
};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rldbg._api_c.Span",
    .tp_basicsize = sizeof(Span),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A traced span: `with` it, or decorate a function with it (rldbg.span).",
    .tp_dealloc = (destructor)span_dealloc,
    .tp_call = (ternaryfunc)span_call,
    .tp_methods = span_methods,
    .tp_members = span_members,
    .tp_getset = span_getset,
};

static PyObject *c_span(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (READY() && nargs == 1 && PyUnicode_CheckExact(args[0])) {
        PyObject *name = args[0];
        if (!g_state->on) {
            /* Off, after the lookup, no args: the shared off span of this name. */
            if (kwnames == NULL && g_state->looked_up) {
                PyObject *off = PyDict_GetItemWithError(g_off, name);
                if (off != NULL)
                    return Py_NewRef(off);
                if (PyErr_Occurred())
                    return NULL;
            }
        } else if (PyUnicode_GET_LENGTH(name) > 0) {
            int err;
            PyObject *kw = kwargs_dict(args, nargs, kwnames, &err);
            if (err)
                return NULL;
            Span *s = PyObject_New(Span, &SpanType);
            if (s == NULL) {
                Py_XDECREF(kw);
                return NULL;
            }
            s->name = Py_NewRef(name);
            s->args = kw;
            s->t0 = 0;
            return (PyObject *)s;
        }
    }
    return PyObject_Vectorcall(g_py_span, args, nargs, kwnames);
}

/* ---- instant and counter -------------------------------------------------------------------- */

static int names_name(PyObject *kwnames) {
    /* instant(name, **args) takes name by keyword too: let Python handle any such call. */
    if (kwnames == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++)
        if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, i), s_kw_name) == 0)
            return 1;
    return 0;
}

/* An instant's or counter's event, stamped now, into `rec` (borrowed); `payload` (its args or
 * values, or NULL) is consumed. None, or NULL with an error set. */
static PyObject *emit_now(PyObject *rec, PyObject *ph, PyObject *name, PyObject *payload) {
    Py_INCREF(rec);   /* getting the context may run Python code that detaches */
    long long t = now_raw();
    if (t == -1 && PyErr_Occurred()) {
        Py_XDECREF(payload);
        Py_DECREF(rec);
        return NULL;
    }
    int rc = emit(rec, user_event(ph, name, t, 0, payload));
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *c_instant(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (!READY() || nargs != 1 || names_name(kwnames))
        return PyObject_Vectorcall(g_py_instant, args, nargs, kwnames);
    PyObject *rec = recorder();
    if (rec == NULL) {
        if (g_state->looked_up)
            Py_RETURN_NONE;
        return PyObject_Vectorcall(g_py_instant, args, nargs, kwnames);   /* the first lookup */
    }
    int err;
    PyObject *kw = kwargs_dict(args, nargs, kwnames, &err);
    if (err)
        return NULL;
    return emit_now(rec, s_i, args[0], kw);
}

static PyObject *c_counter(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (!READY() || nargs != 1 || names_name(kwnames))
        return PyObject_Vectorcall(g_py_counter, args, nargs, kwnames);
    PyObject *rec = recorder();
    if (rec == NULL) {
        if (g_state->looked_up)
            Py_RETURN_NONE;
        return PyObject_Vectorcall(g_py_counter, args, nargs, kwnames);
    }
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *v = args[1 + i];
        if (!PyLong_Check(v) && !PyFloat_Check(v))   /* Python raises the ValueError that names it */
            return PyObject_Vectorcall(g_py_counter, args, nargs, kwnames);
    }
    int err;
    PyObject *values = kwargs_dict(args, nargs, kwnames, &err);
    if (err)
        return NULL;
    if (values == NULL && !(values = PyDict_New()))   /* counter("x") records {} */
        return NULL;
    return emit_now(rec, s_C, args[0], values);
}


/* ---- worker_call: the hook around every registered call on a rank ------------------------------
 *
 * rldbg.instrument.worker_call subclasses this type. Here: its fields, and its __enter__/__exit__
 * as far as tracing off and no profiling go (label the context, remember it, put it back); with
 * tracing on or RLDBG_PROFILE set they call the subclass's _begin/_end (Python), as the Python
 * implementation does. Same steps, same order as instrument.py's Python worker_call. */

typedef struct {
    PyObject_HEAD
    PyObject *role, *rank, *method, *step, *tag;   /* CallScope's fields, and the driver call's tag */
    PyObject *prev[5];                              /* the context before: role, rank, method, step, flow_id */
    PyObject *t0, *m0, *prof;                       /* what _begin sets while tracing/profiling */
} WorkerCall;

static PyObject *g_apply_specs;    /* instrument._apply_live_specs */
static PyObject *g_specs_seen;     /* instrument._specs_seen: [version of the specs applied] */
static PyObject *g_environ;        /* raw environ, and the RLDBG_PROFILE key in it */
static PyObject *g_profile_key;
static double g_recheck_s;
static PyObject *s_specs, *s_traced, *s_begin, *s_end, *s_session, *g_zero;

static void wc_clear_prev(WorkerCall *self) {
    for (int i = 0; i < 5; i++)
        Py_CLEAR(self->prev[i]);
}

/* Not a GC type, like Span: one lives for one call. */
static void wc_dealloc(WorkerCall *self) {
    Py_XDECREF(self->role); Py_XDECREF(self->rank); Py_XDECREF(self->method); Py_XDECREF(self->step);
    Py_XDECREF(self->tag); Py_XDECREF(self->t0); Py_XDECREF(self->m0); Py_XDECREF(self->prof);
    wc_clear_prev(self);
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free((PyObject *)self);
}

static int wc_init(WorkerCall *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"role", "rank", "method", "tag", NULL};
    PyObject *role, *rank, *method, *tag;
    if (kw == NULL && PyTuple_GET_SIZE(args) == 4) {
        role = PyTuple_GET_ITEM(args, 0); rank = PyTuple_GET_ITEM(args, 1);
        method = PyTuple_GET_ITEM(args, 2); tag = PyTuple_GET_ITEM(args, 3);
    } else if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:worker_call", names, &role, &rank, &method, &tag)) {
        return -1;
    }
    Py_XSETREF(self->role, Py_NewRef(role));
    Py_XSETREF(self->rank, Py_NewRef(rank));
    Py_XSETREF(self->method, Py_NewRef(method));
    Py_XSETREF(self->tag, Py_NewRef(tag));
    return 0;
}

/* time.monotonic(), which last_lookup was set from. Read directly on Linux, where it is
 * CLOCK_MONOTONIC; elsewhere Python's clock may be another one (macOS: mach_absolute_time). */
static double monotonic_s(void) {
#ifdef __linux__
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
#else
    static PyObject *fn;
    if (fn == NULL) {
        PyObject *time = PyImport_ImportModule("time");
        fn = time ? PyObject_GetAttrString(time, "monotonic") : NULL;
        Py_XDECREF(time);
    }
    PyObject *r = fn ? PyObject_CallNoArgs(fn) : NULL;
    double v = r ? PyFloat_AsDouble(r) : -1.0;
    Py_XDECREF(r);
    if (v < 0) {
        PyErr_Clear();
        return 1e300;   /* no clock: re-check, as a process that never looked does */
    }
    return v;
#endif
}

/* lookup() or lookup(session=traced): is this process traced now? -1 on error. */
static int wc_lookup(PyObject *traced) {
    PyObject *r;
    if (traced == NULL) {
        r = PyObject_CallNoArgs(g_lookup);
    } else {
        PyObject *kwn = PyTuple_Pack(1, s_session);
        if (kwn == NULL)
            return -1;
        PyObject *argv[1] = {traced};
        r = PyObject_Vectorcall(g_lookup, argv, 0, kwn);
        Py_DECREF(kwn);
    }
    if (r == NULL)
        return -1;
    int on = PyObject_IsTrue(r);
    Py_DECREF(r);
    return on;
}

/* The tag's part of __enter__: step and flow id into the context, live breakpoint specs, and a
 * first look for the collector of a trace that started after this actor did. */
static int wc_enter_tag(PyObject *tag, int *on) {
    PyObject *v = PyObject_GetAttr(tag, s_step);
    if (v == NULL)
        return -1;
    int rc = ctx_set(s_step, v);
    Py_DECREF(v);
    if (rc < 0 || !(v = PyObject_GetAttr(tag, s_flow_id)))
        return -1;
    rc = ctx_set(s_flow_id, v);
    Py_DECREF(v);
    if (rc < 0 || !(v = PyObject_GetAttr(tag, s_specs)))
        return -1;
    int truthy = PyObject_IsTrue(v);
    if (truthy > 0) {
        PyObject *first = PySequence_GetItem(v, 0);
        PyObject *seen = first ? PySequence_GetItem(g_specs_seen, 0) : NULL;
        int same = seen ? PyObject_RichCompareBool(first, seen, Py_EQ) : -1;
        Py_XDECREF(first);
        Py_XDECREF(seen);
        PyObject *r = same == 0 ? PyObject_CallOneArg(g_apply_specs, v) : NULL;
        Py_XDECREF(r);
        if (same < 0 || (same == 0 && r == NULL)) {
            Py_DECREF(v);
            return -1;
        }
    }
    Py_DECREF(v);
    if (truthy < 0)
        return -1;
    if (!*on) {
        if (!(v = PyObject_GetAttr(tag, s_traced)))
            return -1;
        truthy = PyObject_IsTrue(v);
        if (truthy > 0)
            *on = wc_lookup(v);
        Py_DECREF(v);
        if (truthy < 0 || *on < 0)
            return -1;
    }
    return 0;
}

static PyObject *wc_enter(WorkerCall *self, PyObject *unused) {
    wc_clear_prev(self);
    for (int i = 0; i < 5; i++)
        if (!(self->prev[i] = ctx_get(*g_ctx_keys[i])))
            return NULL;
    if (ctx_set(s_role, self->role) < 0 || ctx_set(s_rank, self->rank) < 0 || ctx_set(s_method, self->method) < 0)
        return NULL;
    int on = g_state->on;
    if (self->tag != Py_None) {
        if (wc_enter_tag(self->tag, &on) < 0)
            return NULL;
    } else if (!on && monotonic_s() - g_state->last_lookup >= g_recheck_s) {
        if ((on = wc_lookup(NULL)) < 0)   /* untagged: a slow re-check */
            return NULL;
    }
    PyObject *step = ctx_get(s_step);
    if (step == NULL)
        return NULL;
    Py_XSETREF(self->step, step);
    Py_XSETREF(self->t0, Py_NewRef(g_zero));
    Py_CLEAR(self->prof);
    int profiling = on ? 0 : PySequence_Contains(g_environ, g_profile_key);
    if (profiling < 0)
        return NULL;
    if (on || profiling) {
        PyObject *r = PyObject_CallMethodOneArg((PyObject *)self, s_begin, on ? Py_True : Py_False);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    return Py_NewRef(self);
}

static PyObject *wc_exit(WorkerCall *self, PyObject *const *a, Py_ssize_t n) {
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "__exit__ takes 3 arguments");
        return NULL;
    }
    int t0 = self->t0 != NULL ? PyObject_IsTrue(self->t0) : 0;
    if (t0 < 0)
        return NULL;
    if (t0 || (self->prof != NULL && self->prof != Py_None)) {
        PyObject *r = PyObject_VectorcallMethod(s_end, (PyObject *[]){(PyObject *)self, a[0], a[1], a[2]},
                                                4, NULL);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    } else {
        for (int i = 0; i < 5; i++)
            if (self->prev[i] != NULL && ctx_set(*g_ctx_keys[i], self->prev[i]) < 0)
                return NULL;
    }
    Py_RETURN_FALSE;
}

static PyObject *wc_get_prev(WorkerCall *self, void *unused) {
    PyObject *t = PyTuple_New(5);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < 5; i++)
        PyTuple_SET_ITEM(t, i, Py_NewRef(self->prev[i] ? self->prev[i] : Py_None));
    return t;
}

static PyMethodDef wc_methods[] = {
    {"__enter__", (PyCFunction)wc_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))wc_exit, METH_FASTCALL, NULL},
    {NULL}
};

static PyMemberDef wc_members[] = {
    {"role", T_OBJECT, offsetof(WorkerCall, role), 0, NULL},
    {"rank", T_OBJECT, offsetof(WorkerCall, rank), 0, NULL},
    {"method", T_OBJECT, offsetof(WorkerCall, method), 0, NULL},
    {"step", T_OBJECT, offsetof(WorkerCall, step), 0, NULL},
    {"tag", T_OBJECT, offsetof(WorkerCall, tag), 0, NULL},
    {"t0", T_OBJECT, offsetof(WorkerCall, t0), 0, NULL},
    {"m0", T_OBJECT, offsetof(WorkerCall, m0), 0, NULL},
    {"prof", T_OBJECT, offsetof(WorkerCall, prof), 0, NULL},
    {NULL}
};

static PyGetSetDef wc_getset[] = {
    {"prev", (getter)wc_get_prev, NULL, "the context before the call: (role, rank, method, step, flow_id)", NULL},
    {NULL}
};

static PyTypeObject WorkerCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rldbg._api_c.WorkerCall",
    .tp_basicsize = sizeof(WorkerCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Base of rldbg.instrument.worker_call: its fields, __enter__ and __exit__ in C.",
    .tp_dealloc = (destructor)wc_dealloc,
    .tp_init = (initproc)wc_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = wc_methods,
    .tp_members = wc_members,
    .tp_getset = wc_getset,
};

/* worker_call(role, rank, method, tag) without type_call's argument tuple and __init__ parsing:
 * installed as the vectorcall of the one subclass bind_worker_call() is given (a class called on
 * every registered call). Any other call shape goes through type_call as usual. */
static PyObject *wc_vectornew(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 4 || kwnames != NULL) {
        PyObject *tuple = PyTuple_New(n), *kw = NULL, *r = NULL;
        if (tuple == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++)
            PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
        int err = 0;
        kw = kwargs_dict(args, n, kwnames, &err);
        if (!err)
            r = PyType_Type.tp_call(type, tuple, kw);
        Py_DECREF(tuple);
        Py_XDECREF(kw);
        return r;
    }
    WorkerCall *self = (WorkerCall *)((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 0);
    if (self == NULL)
        return NULL;
    self->role = Py_NewRef(args[0]);
    self->rank = Py_NewRef(args[1]);
    self->method = Py_NewRef(args[2]);
    self->tag = Py_NewRef(args[3]);
    return (PyObject *)self;
}

static PyObject *c_bind_worker_call(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *names[] = {"cls", "apply_specs", "specs_seen", "environ", "profile_key", "recheck_s", NULL};
    PyObject *cls, *ap, *seen, *env, *key;
    double recheck;
    if (!READY()) {
        PyErr_SetString(PyExc_RuntimeError, "bind_worker_call: bind() first");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OO!OOd:bind_worker_call", names, &PyType_Type, &cls, &ap,
                                     &PyList_Type, &seen, &env, &key, &recheck))
        return NULL;
    PyTypeObject *tp = (PyTypeObject *)cls;
    if (!PyType_IsSubtype(tp, &WorkerCallType) || tp->tp_init != WorkerCallType.tp_init
        || tp->tp_new != WorkerCallType.tp_new) {
        PyErr_SetString(PyExc_TypeError, "bind_worker_call: cls must subclass WorkerCall without __init__/__new__");
        return NULL;
    }
    tp->tp_vectorcall = wc_vectornew;
    Py_XSETREF(g_apply_specs, Py_NewRef(ap));
    Py_XSETREF(g_specs_seen, Py_NewRef(seen));
    Py_XSETREF(g_environ, Py_NewRef(env));
    Py_XSETREF(g_profile_key, Py_NewRef(key));
    g_recheck_s = recheck;
    Py_RETURN_NONE;
}

/* ---- binding -------------------------------------------------------------------------------- */

static PyObject *c_bind(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *names[] = {"state", "ctx", "off", "span", "instant", "counter", "lookup", "decorate", NULL};
    PyObject *st, *ctx, *off, *sp, *in, *co, *lk, *dec;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OO!OOOOO:bind", names, &StateBaseType, &st, &ctx, &PyDict_Type,
                                     &off, &sp, &in, &co, &lk, &dec))
        return NULL;
    Py_XSETREF(g_ctx, Py_NewRef(ctx));
    find_ctx_slots(ctx);
    Py_XSETREF(g_off, Py_NewRef(off));
    Py_XSETREF(g_py_span, Py_NewRef(sp));
    Py_XSETREF(g_py_instant, Py_NewRef(in));
    Py_XSETREF(g_py_counter, Py_NewRef(co));
    Py_XSETREF(g_lookup, Py_NewRef(lk));
    Py_XSETREF(g_decorate, Py_NewRef(dec));
    Py_XSETREF(g_state, (StateBase *)Py_NewRef(st));
    Py_RETURN_NONE;
}

static PyObject *c_set_clock(PyObject *mod, PyObject *fn) {
    /* None: read CLOCK_REALTIME directly (time.time_ns's clock); else call fn() for every timestamp. */
    Py_XSETREF(g_clock, fn == Py_None ? NULL : Py_NewRef(fn));
#ifdef _WIN32
    if (g_clock == NULL) {
        PyObject *time = PyImport_ImportModule("time");
        if (time == NULL)
            return NULL;
        g_clock = PyObject_GetAttrString(time, "time_ns");
        Py_DECREF(time);
        if (g_clock == NULL)
            return NULL;
    }
#endif
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"span", (PyCFunction)(void (*)(void))c_span, METH_FASTCALL | METH_KEYWORDS,
     "span($module, name, /, **args)\n--\n\n"
     "A slice named `name` with `args` on the current role/rank's track: `with rldbg.span(...)`\n"
     "or `@rldbg.span(...)`. Raises ValueError for an empty or non-string name."},
    {"instant", (PyCFunction)(void (*)(void))c_instant, METH_FASTCALL | METH_KEYWORDS,
     "instant($module, name, **args)\n--\n\n"
     "A point event named `name` with `args` on the current role/rank's track."},
    {"counter", (PyCFunction)(void (*)(void))c_counter, METH_FASTCALL | METH_KEYWORDS,
     "counter($module, name, **values)\n--\n\n"
     "One sample of numeric series `values` on the counter track \"rank N <name> <series>\"."},
    {"bind", (PyCFunction)(void (*)(void))c_bind, METH_VARARGS | METH_KEYWORDS,
     "bind(state, ctx, off, span, instant, counter, lookup, decorate)\n"
     "Give the hot paths the process state and the Python implementation they defer to."},
    {"bind_worker_call", (PyCFunction)(void (*)(void))c_bind_worker_call, METH_VARARGS | METH_KEYWORDS,
     "bind_worker_call(cls, apply_specs, specs_seen, environ, profile_key, recheck_s)\n"
     "Give WorkerCall what rldbg.instrument's worker_call reads."},
    {"set_clock", (PyCFunction)c_set_clock, METH_O,
     "set_clock(fn)\nTimestamps from fn() instead of CLOCK_REALTIME (None: back to the clock)."},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "rldbg._api_c", "rldbg's user API hot paths in C (see rldbg/_api_c.c).", -1,
    module_methods,
};

static int intern(PyObject **slot, const char *s) {
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__api_c(void) {
    if (PyType_Ready(&StateBaseType) < 0 || PyType_Ready(&SpanType) < 0 || PyType_Ready(&WorkerCallType) < 0)
        return NULL;
    if (!(g_zero = PyLong_FromLong(0)))
        return NULL;
    if (intern(&s_buf, "buf") || intern(&s_capacity, "capacity") || intern(&s_dropped, "dropped")
        || intern(&s_append, "append") || intern(&s_role, "role") || intern(&s_rank, "rank")
        || intern(&s_step, "step") || intern(&s_method, "method") || intern(&s_error, "error")
        || intern(&s_name, "__name__") || intern(&s_kw_name, "name") || intern(&s_X, "X") || intern(&s_i, "i") || intern(&s_C, "C")
        || intern(&s_user, "user") || intern(&s_flow_id, "flow_id") || intern(&s_specs, "specs")
        || intern(&s_traced, "traced") || intern(&s_begin, "_begin") || intern(&s_end, "_end")
        || intern(&s_session, "session"))
        return NULL;
#ifdef _WIN32
    if (c_set_clock(NULL, Py_None) == NULL)
        return NULL;
#endif
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "StateBase", (PyObject *)&StateBaseType) < 0
        || PyModule_AddObjectRef(m, "Span", (PyObject *)&SpanType) < 0
        || PyModule_AddObjectRef(m, "WorkerCall", (PyObject *)&WorkerCallType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
