"""Each expert's own data (calibration text, labelled items): one contract for every feature that reads it."""
