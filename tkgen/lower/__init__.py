"""Lowering: the stage library (`stages`: what each compute stage means, typed and checked) and the
lowering of one variant's stage program into the naive kernel IR (`lowering`); `cost` counts a program's
operations for the roofline."""
