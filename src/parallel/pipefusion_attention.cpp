#include "parallel/pipefusion_attention.h"

#include <cstring>

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::parallel {

void PipeFusionAttention::set_window(int64_t total, int64_t t0, int64_t t1) {
  XDIT_CHECK(0 <= t0 && t0 < t1 && t1 <= total, "PipeFusion window [", t0, ", ", t1, ") of ",
             total);
  total_ = total;
  t0_ = t0;
  t1_ = t1;
}

void PipeFusionAttention::attend(const kernels::AttentionArgs& args,
                                 const nn::AttentionSite& site) {
  if (site.cross) {
    kernels::attention(args);
    return;
  }
  XDIT_CHECK(total_ > 0 && args.q_len == t1_ - t0_ && args.kv_len == args.q_len,
             "PipeFusion attention called on ", args.q_len, " tokens for the window [", t0_, ", ",
             t1_, ")");
  const int64_t B = args.batch, HD = args.heads * args.head_dim, n = args.q_len;
  Buffer& buf = buffers_[site.layer];
  const size_t size = static_cast<size_t>(B * total_ * HD);
  if (buf.k.size() != size) {
    buf.k.assign(size, 0.0f);
    buf.v.assign(size, 0.0f);
    buf.filled = false;
  }
  const bool whole = t0_ == 0 && t1_ == total_;
  XDIT_CHECK(whole || buf.filled, "PipeFusion: layer ", site.layer,
             " attends a patch before a warm-up step filled its K/V buffer");
  if (whole || refresh_) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < n; ++t) {
        const size_t row = static_cast<size_t>((b * total_ + t0_ + t) * HD);
        std::memcpy(buf.k.data() + row, args.k + (b * n + t) * args.k_stride,
                    static_cast<size_t>(HD) * 4);
        std::memcpy(buf.v.data() + row, args.v + (b * n + t) * args.v_stride,
                    static_cast<size_t>(HD) * 4);
      }
    buf.filled = buf.filled || whole;
  }
  kernels::AttentionArgs a = args;
  a.k = buf.k.data();
  a.v = buf.v.data();
  a.k_stride = a.v_stride = HD;
  a.kv_len = total_;
  kernels::attention(a);
}

}  // namespace xdit::parallel
