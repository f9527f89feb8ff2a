/* Built against the 3.11 limited API (PyBuffer_Release, PyObject_CallNoArgs), shipped in a cp39-abi3 wheel. */
#include <Python.h>

static PyObject* size_of(PyObject* self, PyObject* obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
  Py_ssize_t n = view.len;
  PyBuffer_Release(&view);
  return PyLong_FromSsize_t(n);
}

static PyObject* call(PyObject* self, PyObject* fn) { return PyObject_CallNoArgs(fn); }

static PyMethodDef methods[] = {
    {"size_of", size_of, METH_O, NULL}, {"call", call, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "newer", NULL, -1, methods};

PyMODINIT_FUNC PyInit_newer(void) { return PyModule_Create(&module); }
