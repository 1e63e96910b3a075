"""scipy's BLAS ``syrk`` and LAPACK ``syevr`` / ``syevd``, called without holding Python's GIL.

Why: the kernels run independent decompositions side by side on Python threads (``kernel_pool.each_matrix``), which
only pays if every heavy call releases the GIL. torch's do; scipy's f2py wrappers (``scipy.linalg.blas.dsyrk``,
``scipy.linalg.eigh(driver="evr")``) hold it for the whole call (measured: a Python thread made no progress for
0.31 s during a 0.33 s ``dsyrk``). scipy exports the same routines for Cython as C function pointers
(``scipy.linalg.cython_blas`` / ``cython_lapack``, their ``__pyx_capi__`` capsules, as numba's
``get_cython_function_address`` reads them); ctypes calls them and releases the GIL during the call. Same library,
same routine, same arguments as the f2py path (optimal workspace from a query), so the results are bit for bit
those of ``scipy.linalg.blas.?syrk(1.0, a, trans=...)``, ``scipy.linalg.eigh(g, subset_by_index=...,
driver="evr", lower=False)`` and ``scipy.linalg.lapack.?syevd(g, lower=0)`` (tests/plugins/test_lapack_calls.py).

Everything here takes and returns CPU torch tensors, float64 (``syrk`` and ``syevd`` also float32).
"""

import ctypes
import functools
from typing import Tuple

import torch

_DOUBLE, _INT = ctypes.c_double, ctypes.c_int


@functools.lru_cache(maxsize=None)
def _routine(module: str, name: str, n_args: int):
    """The C function ``name`` that ``scipy.linalg.<module>`` exports for Cython, callable through ctypes."""
    import importlib

    capsule = importlib.import_module(f"scipy.linalg.{module}").__pyx_capi__[name]
    get_name, get_pointer = ctypes.pythonapi.PyCapsule_GetName, ctypes.pythonapi.PyCapsule_GetPointer
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    address = get_pointer(capsule, get_name(capsule))
    return ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n_args))(address)  # CFUNCTYPE: the GIL is released


def _int(value: int):
    return ctypes.byref(_INT(value))


def _with_workspace(call, dtype: torch.dtype) -> None:
    """LAPACK's two calls: a workspace query (``lwork = liwork = -1``), then the call with the sizes it asked for.
    ``call(work, lwork, iwork, liwork)`` passes the rest of the routine's arguments."""
    work, iwork = torch.empty(1, dtype=dtype), torch.empty(1, dtype=torch.int32)
    call(work, -1, iwork, -1)
    lwork, liwork = int(work[0]), int(iwork[0])
    call(torch.empty(max(1, lwork), dtype=dtype), lwork, torch.empty(max(1, liwork), dtype=torch.int32), liwork)


def syrk_upper(x: torch.Tensor) -> torch.Tensor:
    """``x^T x`` (``n x n`` for ``x`` of ``m x n``), upper triangle valid, lower triangle zeros, column-major like
    scipy's result: BLAS ``syrk`` computes one triangle, half a GEMM's flops."""
    if not (x.is_contiguous() or x.transpose(-2, -1).is_contiguous()):
        x = x.contiguous()
    m, n = x.shape
    c = torch.zeros(n, n, dtype=x.dtype)  # column-major n x n: Fortran's c(i, j) is c.T[i, j]
    if x.is_contiguous():  # Fortran sees x^T (n x m, ld n): C = A A^T
        trans, lda = b"N", max(1, n)
    else:  # x is column-major: Fortran sees x (m x n, ld m): C = A^T A
        trans, lda = b"T", max(1, m)
    scalar = _DOUBLE if x.dtype == torch.float64 else ctypes.c_float
    routine = _routine("cython_blas", "dsyrk" if x.dtype == torch.float64 else "ssyrk", 10)
    routine(b"U", trans, _int(n), _int(m), ctypes.byref(scalar(1.0)), x.data_ptr(), _int(lda),
            ctypes.byref(scalar(0.0)), c.data_ptr(), _int(max(1, n)))
    return c.T


def syevr_top(gram: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest eigenpairs of a symmetric float64 matrix whose upper triangle is valid, ascending like
    ``torch.linalg.eigh``: LAPACK ``dsyevr`` computes only the requested eigenvectors (relatively robust
    representations). Returns eigenvalues ``(k,)`` and eigenvectors ``(n, k)``."""
    n = gram.shape[-1]
    a = gram.T.clone(memory_format=torch.contiguous_format)  # column-major copy (syevr overwrites it): Fortran's
    # a(i, j) is gram[i, j]
    w = torch.empty(max(1, n), dtype=torch.float64)
    z = torch.empty(max(1, k), max(1, n), dtype=torch.float64)  # column-major n x k
    isuppz = torch.empty(2 * max(1, k), dtype=torch.int32)
    found, info, zero = _INT(0), _INT(0), ctypes.byref(_DOUBLE(0.0))
    routine = _routine("cython_lapack", "dsyevr", 21)

    def call(work, lwork, iwork, liwork):
        routine(b"V", b"I", b"U", _int(n), a.data_ptr(), _int(max(1, n)), zero, zero, _int(n - k + 1), _int(n),
                zero, ctypes.byref(found), w.data_ptr(), z.data_ptr(), _int(max(1, n)), isuppz.data_ptr(),
                work.data_ptr(), _int(lwork), iwork.data_ptr(), _int(liwork), ctypes.byref(info))

    _with_workspace(call, torch.float64)
    if info.value != 0 or found.value != k:
        raise RuntimeError(f"LAPACK dsyevr failed (info {info.value}, {found.value} of {k} eigenpairs)")
    return w[:k].clone(), z.T


def syevd(gram: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Every eigenpair of a symmetric float64 or float32 matrix whose upper triangle is valid, as
    ``torch.linalg.eigh(gram, UPLO="U")`` returns them (eigenvalues ascending, eigenvectors as columns): LAPACK
    ``?syevd`` (divide and conquer), the routine torch calls, from scipy's OpenBLAS instead of torch's LAPACK
    (measured faster on one thread: ``linalg.eigh_upper``)."""
    n = gram.shape[-1]
    a = gram.T.clone(memory_format=torch.contiguous_format)  # column-major copy; syevd leaves the eigenvectors in it
    w = torch.empty(max(1, n), dtype=gram.dtype)
    info = _INT(0)
    routine = _routine("cython_lapack", "dsyevd" if gram.dtype == torch.float64 else "ssyevd", 11)

    def call(work, lwork, iwork, liwork):
        routine(b"V", b"U", _int(n), a.data_ptr(), _int(max(1, n)), w.data_ptr(), work.data_ptr(), _int(lwork),
                iwork.data_ptr(), _int(liwork), ctypes.byref(info))

    _with_workspace(call, gram.dtype)
    if info.value != 0:
        raise RuntimeError(f"LAPACK {'d' if gram.dtype == torch.float64 else 's'}syevd failed (info {info.value}): "
                           f"the eigensolver did not converge")
    return w[:n], a.T
