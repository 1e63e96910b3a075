"""wildmerge's merge methods inside mergekit: parameters declared once, per-tensor kernels (task-vector, spectral,
norm-corrected, baselines), their registration, recipe checks, and the layer-wise methods (``layerwise/``)."""
