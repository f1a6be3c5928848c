"""What generated code calls at run time: the compile cache, argument checks, device dispatch."""
