"""The data-based merge methods: RegMean, Chain of Merges and MaTS merge layer by layer from the inputs each layer
sees on calibration data, streaming one block at a time (driver, architecture map, closed-form maths, conjugate
gradient, covariate shift); Fisher merging weighs every parameter by each expert's diagonal Fisher on its data;
ProDistill and the trained Localize-and-Stitch train coefficients or masks; AdaMerging and AdaMerging++
(``adamerging.py``, also the optimiser of ``wildmerge tune --adamerging``) learn task-vector coefficients by
entropy minimisation."""
