"""Code generation: the kernel IR printed as TileLang factories (`print_tilelang`) and as the PyTorch
reference (`print_torch`), through the expression printers (`printers`, `pyexpr`); variants merged into one
function (`merge_variants`); long lines broken (`format_source`); every file rendered from its template and
written when it changed (`generate`)."""
