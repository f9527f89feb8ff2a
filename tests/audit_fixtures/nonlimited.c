/* Tagged abi3 but calls CPython API outside the limited API. */
#include <Python.h>

static PyObject* show(PyObject* self, PyObject* obj) {
  if (PyObject_Print(obj, stdout, 0) < 0) return NULL;
  PyObject** dict = _PyObject_GetDictPtr(obj);
  return PyBool_FromLong(dict != NULL);
}

static PyMethodDef methods[] = {{"show", show, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "nonlimited", NULL, -1, methods};

PyMODINIT_FUNC PyInit_nonlimited(void) { return PyModule_Create(&module); }
