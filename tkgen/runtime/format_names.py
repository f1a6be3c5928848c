"""The element formats torch dtypes name, by the dtype's name in torch, without importing torch: the runtime
maps dtypes given for format params through it (tkgen/runtime/conventions.py), and the generator reads its
format names to tell which params take dtypes (tkgen/codegen/generate.py), which must not import torch."""

# int8 and uint8 containers name no format: they hold codes; float4_e2m1fn_x2 is in newer torch only
FORMAT_OF_TORCH_NAME = {"float32": "fp32", "bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2",
                        "float16": "fp16", "float4_e2m1fn_x2": "e2m1"}
FORMAT_NAMES = frozenset(FORMAT_OF_TORCH_NAME.values())
