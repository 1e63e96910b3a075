"""scipy's BLAS ``syrk`` / ``symm`` and LAPACK ``syevr`` / ``syevd``, called without holding Python's GIL.

Why: the kernels run independent decompositions side by side on Python threads (``linalg.each_matrix``), which
only pays if every heavy call releases the GIL. torch's do; scipy's f2py wrappers (``scipy.linalg.blas.dsyrk``,
``scipy.linalg.eigh(driver="evr")``) hold it for the whole call (measured: a Python thread made no progress for
0.31 s during a 0.33 s ``dsyrk``). scipy exports the same routines for Cython as C function pointers
(``scipy.linalg.cython_blas`` / ``cython_lapack``, their ``__pyx_capi__`` capsules, as numba's
``get_cython_function_address`` reads them); ctypes calls them and releases the GIL during the call. Same library,
same routine, same arguments as the f2py path (optimal workspace from a query), so the results are bit for bit
those of ``scipy.linalg.blas.?syrk(1.0, a, trans=...)``, ``scipy.linalg.eigh(g, subset_by_index=...,
driver="evr", lower=False)`` and ``scipy.linalg.lapack.?syevd(g, lower=0)`` (tests/plugins/test_lapack_calls.py).

Everything here takes and returns CPU torch tensors, float64 (``syrk``, ``symm`` and ``syevd`` also float32).
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
    ``call(work, lwork, iwork, liwork)`` passes the rest of the routine's arguments (a routine without an integer
    workspace ignores ``iwork`` and ``liwork``)."""
    work, iwork = torch.ones(1, dtype=dtype), torch.ones(1, dtype=torch.int32)
    call(work, -1, iwork, -1)
    lwork, liwork = int(work[0]), int(iwork[0])
    call(torch.empty(max(1, lwork), dtype=dtype), lwork, torch.empty(max(1, liwork), dtype=torch.int32), liwork)


def _prefix(dtype: torch.dtype) -> str:
    return "d" if dtype == torch.float64 else "s"


def _scalars(dtype: torch.dtype):
    scalar = _DOUBLE if dtype == torch.float64 else ctypes.c_float
    return ctypes.byref(scalar(1.0)), ctypes.byref(scalar(0.0))


def _row_or_column_major(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_contiguous() or x.transpose(-2, -1).is_contiguous() else x.contiguous()


def empty_column_major(rows: int, cols: int, dtype: torch.dtype, zero: bool = False) -> torch.Tensor:
    """A ``rows x cols`` tensor laid out as Fortran's column-major (its ``.T`` is contiguous)."""
    return (torch.zeros if zero else torch.empty)(cols, rows, dtype=dtype).T


def syrk_upper(x: torch.Tensor) -> torch.Tensor:
    """``x^T x`` (``n x n`` for ``x`` of ``m x n``), upper triangle valid, lower triangle zeros, column-major like
    scipy's result: BLAS ``syrk`` computes one triangle, half a GEMM's flops."""
    x = _row_or_column_major(x)
    out = empty_column_major(x.shape[1], x.shape[1], x.dtype, zero=True)
    whole = slice(0, x.shape[1])
    gram_tile(x, out, whole, whole)
    return out


def gram_tile(x: torch.Tensor, out: torch.Tensor, rows: slice, cols: slice) -> None:
    """``out[rows, cols] = x[:, rows]^T x[:, cols]``, one tile of the upper triangle of ``x^T x`` (``rows`` ends at
    or before ``cols`` starts, or is ``cols``: then ``syrk``, its upper triangle only; else ``gemm``). ``x`` row- or
    column-major, ``out`` column-major (``empty_column_major``). Tiles whose edges are multiples of 64 give the
    bytes of one whole ``syrk`` (tested)."""
    m, n = x.shape
    size, one, zero = x.element_size(), *_scalars(x.dtype)
    i0, i1, j0, j1 = rows.start, rows.stop, cols.start, cols.stop
    target = out.data_ptr() + (j0 * n + i0) * size
    if x.is_contiguous():  # Fortran sees x^T (n x m, ld n): the tile is A[rows, :] A[cols, :]^T
        first, second, lda, trans = x.data_ptr() + i0 * size, x.data_ptr() + j0 * size, n, (b"N", b"T")
    else:  # Fortran sees x (m x n, ld m): the tile is A[:, rows]^T A[:, cols]
        first, second, lda, trans = x.data_ptr() + i0 * m * size, x.data_ptr() + j0 * m * size, m, (b"T", b"N")
    if (i0, i1) == (j0, j1):
        _routine("cython_blas", _prefix(x.dtype) + "syrk", 10)(
            b"U", trans[0], _int(i1 - i0), _int(m), one, first, _int(max(1, lda)), zero, target, _int(max(1, n)))
    else:
        _routine("cython_blas", _prefix(x.dtype) + "gemm", 13)(
            trans[0], trans[1], _int(i1 - i0), _int(j1 - j0), _int(m), one, first, _int(max(1, lda)), second,
            _int(max(1, lda)), zero, target, _int(max(1, n)))


def symm_right(x: torch.Tensor, sym: torch.Tensor) -> torch.Tensor:
    """``x @ sym`` for a symmetric ``sym`` (``n x n``) whose upper triangle is valid (the lower one may be zeros, as
    ``syrk_upper`` leaves it): BLAS ``symm`` reads one triangle, so the other is never filled in. ``x`` (``m x n``,
    same dtype) in either memory layout; the result comes back in ``x``'s."""
    x = _row_or_column_major(x)
    out = torch.empty_like(x) if x.is_contiguous() else empty_column_major(*x.shape, x.dtype)
    symm_rows(x, sym, out, slice(0, x.shape[0]))
    return out


def symm_rows(x: torch.Tensor, sym: torch.Tensor, out: torch.Tensor, rows: slice) -> None:
    """``out[rows] = x[rows] @ sym`` (``symm_right`` on a block of rows); ``x`` and ``out`` row-major or column-major
    alike. Blocks whose edges are multiples of 64 give the bytes of one whole call (tested)."""
    sym = _row_or_column_major(sym)
    m, n = x.shape
    # Fortran reads ``sym``'s buffer column-major: as sym itself when sym is column-major (its upper triangle
    # stays the upper one), as sym^T when it is row-major (sym's upper triangle is then Fortran's lower one)
    uplo = b"U" if sym.transpose(-2, -1).is_contiguous() else b"L"
    size, one, zero = x.element_size(), *_scalars(x.dtype)
    r0, r1 = rows.start, rows.stop
    routine = _routine("cython_blas", _prefix(x.dtype) + "symm", 12)
    if x.is_contiguous():  # Fortran sees x^T (n x m, ld n): C^T = sym x^T, the rows are columns of x^T
        routine(b"L", uplo, _int(n), _int(r1 - r0), one, sym.data_ptr(), _int(max(1, n)), x.data_ptr() + r0 * n * size,
                _int(max(1, n)), zero, out.data_ptr() + r0 * n * size, _int(max(1, n)))
    else:  # Fortran sees x (m x n, ld m): C = x sym
        routine(b"R", uplo, _int(r1 - r0), _int(n), one, sym.data_ptr(), _int(max(1, n)), x.data_ptr() + r0 * size,
                _int(max(1, m)), zero, out.data_ptr() + r0 * size, _int(max(1, m)))


def gemm_rows(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, rows: slice) -> None:
    """``out[rows] = a[rows] @ b``, all three column-major (``empty_column_major``; LAPACK's results are)."""
    m, k = a.shape
    size, one, zero = a.element_size(), *_scalars(a.dtype)
    r0, r1 = rows.start, rows.stop
    _routine("cython_blas", _prefix(a.dtype) + "gemm", 13)(
        b"N", b"N", _int(r1 - r0), _int(b.shape[1]), _int(k), one, a.data_ptr() + r0 * size, _int(max(1, m)),
        b.data_ptr(), _int(max(1, k)), zero, out.data_ptr() + r0 * size, _int(max(1, m)))


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


# ---------------------------------------------------------------- ?syevd's three steps, callable one by one


def sytrd(gram: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``?sytrd``: ``gram = Q T Q^T`` (upper triangle read), ``T`` tridiagonal. Returns the reflectors (a column-major
    copy of ``gram`` overwritten), ``T``'s diagonal and off-diagonal and the reflectors' scalars."""
    n = gram.shape[-1]
    a = gram.T.clone(memory_format=torch.contiguous_format).T  # column-major copy
    d, e, tau = (torch.empty(max(1, n), dtype=gram.dtype) for _ in range(3))
    info = _INT(0)
    routine = _routine("cython_lapack", _prefix(gram.dtype) + "sytrd", 10)
    _with_workspace(lambda work, lwork, *_: routine(
        b"U", _int(n), a.data_ptr(), _int(max(1, n)), d.data_ptr(), e.data_ptr(), tau.data_ptr(), work.data_ptr(),
        _int(lwork), ctypes.byref(info)), gram.dtype)
    _check(info, "sytrd", gram.dtype)
    return a, d[:n], e[:max(0, n - 1)], tau[:max(0, n - 1)]


def orgtr(reflectors: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """``?orgtr``: ``Q`` (column-major, in place of ``sytrd``'s reflectors, which it returns)."""
    n = reflectors.shape[-1]
    info = _INT(0)
    routine = _routine("cython_lapack", _prefix(reflectors.dtype) + "orgtr", 8)
    _with_workspace(lambda work, lwork, *_: routine(
        b"U", _int(n), reflectors.data_ptr(), _int(max(1, n)), tau.data_ptr(), work.data_ptr(), _int(lwork),
        ctypes.byref(info)), reflectors.dtype)
    _check(info, "orgtr", reflectors.dtype)
    return reflectors


def stedc(diagonal: torch.Tensor, off_diagonal: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``?stedc`` (divide and conquer, ``compz = "I"``): every eigenpair of the tridiagonal ``T``: eigenvalues
    ascending, eigenvectors as the columns of a column-major ``Z``. Its inputs are left alone."""
    n = diagonal.shape[0]
    w, e = diagonal.clone(), torch.cat([off_diagonal, off_diagonal.new_zeros(1)])
    z = empty_column_major(n, n, diagonal.dtype)
    info = _INT(0)
    routine = _routine("cython_lapack", _prefix(diagonal.dtype) + "stedc", 11)
    _with_workspace(lambda work, lwork, iwork, liwork: routine(
        b"I", _int(n), w.data_ptr(), e.data_ptr(), z.data_ptr(), _int(max(1, n)), work.data_ptr(), _int(lwork),
        iwork.data_ptr(), _int(liwork), ctypes.byref(info)), diagonal.dtype)
    _check(info, "stedc", diagonal.dtype)
    return w, z


def _check(info, name: str, dtype: torch.dtype) -> None:
    if info.value != 0:
        raise RuntimeError(f"LAPACK {_prefix(dtype)}{name} failed (info {info.value})")
