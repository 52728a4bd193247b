"""Analyses that draw: training curves from TensorBoard event files (`curves`), the paper's
Figure 2 (`transitions`: how far each layer moves its input), and the chart helpers they share
(`charts`; matplotlib, imported on first use)."""
