"""RegMean and Chain of Merges: methods that merge layer by layer from the inputs each layer sees on calibration data,
streaming one block at a time (driver, architecture map, closed-form maths, covariate shift)."""
