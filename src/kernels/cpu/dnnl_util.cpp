#include "kernels/cpu/dnnl_util.h"

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/aligned.h"
#include "core/error.h"
#include "core/log.h"

namespace xdit::kernels::cpu {

using dt = dnnl::memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

namespace {
// The calling thread's scratchpad buffer, grown to at least `bytes`.
void* thread_scratch_buffer(size_t bytes) {
  thread_local AlignedVector<char> buf;
  grow_discarding(buf, bytes);
  return buf.data();
}
}  // namespace

dnnl::memory thread_scratchpad(const dnnl::primitive_desc_base& pd) {
  const dnnl::memory::desc md = pd.scratchpad_desc();
  return dnnl::memory(md, engine(), thread_scratch_buffer(md.get_size()));
}

bool is_reference_impl(const std::string& impl) {
  return impl.rfind("ref", 0) == 0;
}

void warn_if_reference(const std::string& impl, const char* op, const std::string& shape) {
  if (!is_reference_impl(impl)) return;
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (warned.insert(std::string(op) + shape).second)
    XDIT_WARN("oneDNN has only a slow reference kernel (", impl, ") for the ", op, " ", shape,
              " on this CPU");
}

void rethrow_dnnl(const dnnl::error& e, const std::string& what) {
  XDIT_FAIL("oneDNN failed in ", what, ": ", e.what(), " (status ", static_cast<int>(e.status),
            ")");
}

namespace {

struct Gemm {
  dnnl::matmul prim;
  dnnl::matmul::primitive_desc pd;
  dnnl::memory::desc a, b, c;
  dnnl::memory::desc b_plain;  // b_blocked: the plain B that gemm_pack_b reads
  dnnl::reorder::primitive_desc pack_pd;
  dnnl::reorder pack;  // b_blocked: plain B → b
};

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int, bool,
                       int64_t>;

// A matrix of `rows` × `cols` with `ld` elements between rows (or, for
// `trans`, between columns), repeated `batch` times one after the other.
dnnl::memory::desc matrix(int64_t batch, int64_t rows, int64_t cols, int64_t ld, bool trans,
                          dt type) {
  const int64_t items = trans ? cols : rows;  // the rows of storage
  if (batch == 1)
    return trans ? dnnl::memory::desc({rows, cols}, type, dnnl::memory::dims{1, ld})
                 : dnnl::memory::desc({rows, cols}, type, dnnl::memory::dims{ld, 1});
  return trans
             ? dnnl::memory::desc({batch, rows, cols}, type, dnnl::memory::dims{items * ld, 1, ld})
             : dnnl::memory::desc({batch, rows, cols}, type, dnnl::memory::dims{items * ld, ld, 1});
}

const Gemm& get_gemm(const GemmShape& s) {
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Gemm>> cache;
  const Key key{s.m,         s.n,          s.k,
                s.lda,       s.ldb,        s.ldc,
                s.b_trans,   s.accumulate, static_cast<int>(s.dt),
                s.b_blocked, s.batch};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  auto g = std::make_unique<Gemm>();
  try {
    g->a = matrix(s.batch, s.m, s.k, s.lda, false, s.dt);
    g->b = matrix(s.batch, s.k, s.n, s.ldb, s.b_trans, s.dt);
    if (s.b_blocked) {
      g->b_plain = g->b;
      g->b = dnnl::memory::desc(g->b.get_dims(), s.dt, dnnl::memory::format_tag::any);
    }
    g->c = matrix(s.batch, s.m, s.n, s.ldc, false, dt::f32);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    g->pd = dnnl::matmul::primitive_desc(engine(), g->a, g->b, g->c, attr);
    warn_if_reference(g->pd.impl_info_str(), s.batch > 1 ? "batched matmul" : "attention matmul",
                      detail::concat(s.m, "x", s.k, " -> ", s.n));
    g->prim = dnnl::matmul(g->pd);
    if (s.b_blocked) {
      g->b = g->pd.weights_desc();
      dnnl::primitive_attr pack_attr;
      pack_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      g->pack_pd = dnnl::reorder::primitive_desc(engine(), g->b_plain, engine(), g->b, pack_attr);
      g->pack = dnnl::reorder(g->pack_pd);
    }
    XDIT_DEBUG("gemm ", s.m, "x", s.n, "x", s.k,
               (s.b_blocked ? " (B blocked)"
                : s.b_trans ? " (B^T)"
                            : ""),
               " -> ", g->pd.impl_info_str());
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, "creating a matmul");
  }
  return *cache.emplace(key, std::move(g)).first->second;
}

}  // namespace

size_t gemm_b_bytes(const GemmShape& s) {
  return get_gemm(s).b.get_size();
}

void gemm_pack_b(const GemmShape& s, const void* plain, void* blocked) {
  XDIT_CHECK(s.b_blocked, "gemm_pack_b needs a b_blocked shape");
  const Gemm& g = get_gemm(s);
  auto& e = engine();
  dnnl::memory src(g.b_plain, e, const_cast<void*>(plain));
  dnnl::memory dst(g.b, e, blocked);
  try {
    g.pack.execute(thread_stream(), {{DNNL_ARG_FROM, src},
                                     {DNNL_ARG_TO, dst},
                                     {DNNL_ARG_SCRATCHPAD, thread_scratchpad(g.pack_pd)}});
  } catch (const dnnl::error& err) {
    rethrow_dnnl(err, "packing a matmul operand");
  }
}

std::string gemm_implementation(const GemmShape& s) {
  return get_gemm(s).pd.impl_info_str();
}

void gemm(const GemmShape& s, const void* a, const void* b, float* c) {
  const Gemm& g = get_gemm(s);
  // Attention calls this thousands of times a step on ~10 µs products, where
  // making four dnnl::memory objects a call cost a third of the time: each
  // thread keeps its memory objects (and argument map) per primitive and only
  // points them at this call's buffers.
  struct Args {
    dnnl::memory a, b, c, scratch;
    size_t scratch_bytes = 0;
    std::unordered_map<int, dnnl::memory> map;
  };
  thread_local std::unordered_map<const Gemm*, Args> per_thread;
  auto [it, fresh] = per_thread.try_emplace(&g);
  Args& args = it->second;
  if (fresh) {
    auto& e = engine();
    const dnnl::memory::desc sd = g.pd.scratchpad_desc();
    args.a = dnnl::memory(g.a, e, DNNL_MEMORY_NONE);
    args.b = dnnl::memory(g.b, e, DNNL_MEMORY_NONE);
    args.c = dnnl::memory(g.c, e, DNNL_MEMORY_NONE);
    args.scratch = dnnl::memory(sd, e, DNNL_MEMORY_NONE);
    args.scratch_bytes = sd.get_size();
    args.map = {{DNNL_ARG_SRC, args.a},
                {DNNL_ARG_WEIGHTS, args.b},
                {DNNL_ARG_DST, args.c},
                {DNNL_ARG_SCRATCHPAD, args.scratch}};
  }
  args.a.set_data_handle(const_cast<void*>(a));
  args.b.set_data_handle(const_cast<void*>(b));
  args.c.set_data_handle(c);
  args.scratch.set_data_handle(thread_scratch_buffer(args.scratch_bytes));
  g.prim.execute(thread_stream(), args.map);
}

}  // namespace xdit::kernels::cpu
