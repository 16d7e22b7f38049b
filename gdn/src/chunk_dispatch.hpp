/// @file chunk_dispatch.hpp
/// @brief Runtime dtypes → the element-type tags of chunk_body.hpp (host-side dispatch).
#pragma once

#include "chunk_body.hpp"
#include "kverify/common/check.hpp"
#include "kverify/gdn/chunk.hpp"

namespace kverify::gdn::chunk {

/// Calls f(TIO{}, TG{}) with the tags of (io, gate). @throws kverify::Error for an unknown dtype.
template <class F>
void with_types(Dt io, Dt gate, F&& f) {
  auto with_gate = [&](auto tio) {
    switch (gate) {
      case Dt::F32: return f(tio, body::F32{});
      case Dt::F16: return f(tio, body::F16{});
      case Dt::BF16: return f(tio, body::BF16{});
    }
    KV_CHECK(false, "gate dtype %d is not float32, float16 or bfloat16", int(gate));
  };
  switch (io) {
    case Dt::F32: return with_gate(body::F32{});
    case Dt::F16: return with_gate(body::F16{});
    case Dt::BF16: return with_gate(body::BF16{});
  }
  KV_CHECK(false, "q/k/v dtype %d is not float32, float16 or bfloat16", int(io));
}

}  // namespace kverify::gdn::chunk
