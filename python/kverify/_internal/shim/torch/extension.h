// kverify fast build (kverify/_internal/fastbuild.py): the CUDA translation unit of a
// load_inline extension finds this file first when it includes <torch/extension.h>.
//
// torch/extension.h is torch/all.h (the whole C++ frontend: nn, optim, data, serialize, jit)
// plus the Python bindings. A CUDA source of an extension needs the tensor API, which
// torch/types.h gives (load_inline prepends it to every CUDA source anyway); the bindings live in
// the generated main.cpp, which the host compiler builds with the real header. A CUDA source that
// needs more than torch/types.h fails to compile here and is rebuilt with the stock headers, so
// this file changes how long a build takes, never what it builds. Device-code flags are untouched.
#pragma once
#include <torch/types.h>
