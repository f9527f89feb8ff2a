/* A CPython extension inside the limited API (3.9), with no torch at all. */
#include <Python.h>

static PyObject* answer(PyObject* self, PyObject* args) { return PyLong_FromLong(42); }

static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "plain", NULL, -1, methods};

PyMODINIT_FUNC PyInit_plain(void) { return PyModule_Create(&module); }
