"""wildmerge's merge methods inside mergekit, their kernels, and the door through which wildmerge changes its host.

- Parameters declared once (``method_params.py``: defaults and ranges live there and nowhere else); the task-vector
  template (``task_vector_method.py``); methods listed in each module's ``METHODS`` (``methods.py``,
  ``norm_methods.py``, ``baselines.py``, ``lines.py``; ``knots.py``: KnOTS-TIES; ``localize_stitch.py``: dataless
  Localize-and-Stitch), registered from ``registration.METHOD_MODULES``; recipe checks (``validation.py``).
- Kernels: ``spectral.py`` on generic linear algebra (``linalg.py``, ``linalg_randomized.py``; scipy's LAPACK
  without the GIL: ``lapack.py``); TIES' trim in linear time inside wildmerge's merges (``trim.py``).
- The host: ``entrypoint.py`` (``run_merge`` wrapped, ``wildmerge_checks``) and ``tensors_side_by_side.py`` (the
  planner that joins neighbouring CPU matrices of our per-tensor methods into one task).
- ``layerwise/``: RegMean, Chain of Merges, MaTS (conjugate gradient on RegMean's Grams: ``mats.py``), Fisher merging
  (``fisher.py``), ProDistill (``prodistill.py``), the trained Localize-and-Stitch (``localize_trained.py``),
  AdaMerging and AdaMerging++ (``adamerging.py``, also ``tune --adamerging``'s optimiser); the importance weights
  measured through any model (``reference.py``)."""
