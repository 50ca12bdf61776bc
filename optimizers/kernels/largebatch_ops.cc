// The framework's CPU kernels for layer-wise updates: LARS, Momentum + LARC
// (LargebatchTrustMomentum) and LAMB (LargebatchLamb, further down), and the
// gradient statistics of optimize_loss (LargebatchGradientStats, at the end).
//
// Each op updates many variables in one call, in place, one variable at a
// time per thread, so that a variable's second pass finds it in the cache.
//
// The op LargebatchTrustMomentum updates N float32 resource variables and
// their momentum slots in place. For each variable it takes ‖w‖ and ‖g‖,
// turns them into a per-variable factor (the LARS trust ratio or the LARC
// coefficient) and applies the momentum update, all before moving on to the
// next variable: the update pass finds w and g still in the cache that the
// norm pass brought them into, so the whole update reads w, g and v from
// memory about once and writes w and v once. Variables are shared among the
// intra-op threads, largest first, each thread taking the next variable.
//
// The math is that of the plain tensor functions in optimizers/lars.py
// (trust_ratio, lars_momentum_update) and optimizers/stages.py
// (larc_coefficients) followed by Keras' SGD update; see docs/math.md. Norms are
// summed in double, factors are computed in float32 as the Python paths do.
//
//   mode "lars", with wd the weight decay of the variable (0 where decay is
//   false) and t its trust ratio (1 where adapt is false):
//     t = eeta·‖w‖ / (‖g‖ + wd·‖w‖ + eps)   (1 when ‖w‖ or ‖g‖ is 0)
//     v ← m·v + lr·t·(g + wd·w);  w ← w − v
//     (Nesterov: w ← w − (lr·t·(g + wd·w) + m·v))
//   mode "larc_clip" / "larc_scale", adapted variable:
//     clip:  c = min(max(eeta·‖w‖ / (lr·(‖g‖ + eps)), min_update), 1)
//     scale: c = max(eeta·‖w‖ / (‖g‖ + eps), min_update)
//     (c = 1 when ‖w‖ or ‖g‖ is 0, and in clip mode when lr is 0: no 0/0,
//     and a zero-initialised variable is not frozen at min_update)
//     v ← m·v − lr·c·g;  w ← w + v   (Nesterov: w ← w + m·v − lr·c·g)
//   mode "larc_*", skipped variable: c = 1.
//
// Output: the factor (t or c) of every variable, 1 for skipped ones.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"
#include "tensorflow/core/platform/blocking_counter.h"

namespace largebatch {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::Var;

// The output of both ops: one float per variable.
absl::Status OneValuePerVariable(::tensorflow::shape_inference::InferenceContext* c) {
  int n = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("N", &n));
  c->set_output(0, c->Vector(n));
  return absl::OkStatus();
}

REGISTER_OP("LargebatchTrustMomentum")
    .Input("variables: N * resource")
    .Input("slots: N * resource")
    .Input("gradients: N * float")
    .Input("learning_rate: float")
    .Output("factors: float")
    .Attr("N: int >= 1")
    .Attr("adapt: list(bool)")
    .Attr("decay: list(bool) = []")
    .Attr("mode: {'lars', 'larc_clip', 'larc_scale'}")
    .Attr("momentum: float")
    .Attr("weight_decay: float = 0.0")
    .Attr("eeta: float")
    .Attr("epsilon: float = 0.0")
    .Attr("min_update: float = 0.0")
    .Attr("use_nesterov: bool = false")
    .SetIsStateful()
    .SetShapeFn(OneValuePerVariable);

namespace {

enum class Mode { kLars, kLarcClip, kLarcScale };

// Σx² of n floats, in double, in independent partial sums the compiler
// turns into vector lanes.
double SquaredSum(const float* __restrict x, int64_t n) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  for (; i < n; ++i) acc[0] += static_cast<double>(x[i]) * x[i];
  double sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += acc[k];
  return sum;
}

// The variables behind the first ``count`` inputs (resource handles).
absl::Status LookupVariables(OpKernelContext* ctx, int count,
                             std::vector<::tensorflow::core::RefCountPtr<Var>>* vars) {
  vars->resize(count);
  for (int i = 0; i < count; ++i) {
    TF_RETURN_IF_ERROR(LookupResource(ctx, HandleFromInput(ctx, i), &(*vars)[i]));
  }
  return absl::OkStatus();
}

// Locks every distinct variable once, in address order (no deadlock with
// another op locking an overlapping set the same way), until destroyed.
class VariableLocks {
 public:
  explicit VariableLocks(const std::vector<::tensorflow::core::RefCountPtr<Var>>& vars) {
    for (const auto& var : vars) locks_.push_back(var->mu());
    std::sort(locks_.begin(), locks_.end());
    locks_.erase(std::unique(locks_.begin(), locks_.end()), locks_.end());
    for (auto* mu : locks_) mu->lock();
  }
  ~VariableLocks() {
    for (auto it = locks_.rbegin(); it != locks_.rend(); ++it) (*it)->unlock();
  }
  VariableLocks(const VariableLocks&) = delete;
  VariableLocks& operator=(const VariableLocks&) = delete;

 private:
  std::vector<::tensorflow::mutex*> locks_;
};

// Checks that every variable is an initialized float32 one, that no variable
// appears twice, and makes each buffer private to its variable before it is
// written in place (copy on write, as TensorFlow's own training ops do: a
// tensor read earlier may still share the buffer).
absl::Status PrivateFloatBuffers(OpKernelContext* ctx,
                                 const std::vector<::tensorflow::core::RefCountPtr<Var>>& vars,
                                 const char* op) {
  std::vector<Var*> seen;
  for (size_t i = 0; i < vars.size(); ++i) {
    Var* var = vars[i].get();
    if (!var->is_initialized || var->tensor()->dtype() != ::tensorflow::DT_FLOAT) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": input ", i, " is not an initialized float32 variable"));
    }
    if (std::find(seen.begin(), seen.end(), var) != seen.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": input ", i, " is a variable given twice"));
    }
    seen.push_back(var);
    Tensor* t = var->tensor();
    if (var->copy_on_read_mode.load() || !t->RefCountIsOne()) {
      Tensor copy;
      ::tensorflow::AllocatorAttributes attr;
      attr.set_gpu_compatible(true);
      attr.set_nic_compatible(true);
      TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), &copy, attr));
      if (t->NumElements() > 0) {
        std::memcpy(copy.flat<float>().data(), t->flat<float>().data(),
                    sizeof(float) * t->NumElements());
      }
      *t = copy;
    }
  }
  return absl::OkStatus();
}

// Calls fn(i) for i in [0, sizes.size()) on the intra-op threads, largest
// size first, each thread taking the next index when it is done.
template <typename Fn>
void RunLargestFirst(OpKernelContext* ctx, const std::vector<int64_t>& sizes, Fn fn) {
  const int n = static_cast<int>(sizes.size());
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&sizes](int a, int b) { return sizes[a] > sizes[b]; });
  std::atomic<int> next{0};
  auto worker = [&]() {
    for (int k = next.fetch_add(1); k < n; k = next.fetch_add(1)) fn(order[k]);
  };
  const auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
  const int helpers = std::max(0, std::min(threads->num_threads, n) - 1);
  ::tensorflow::BlockingCounter done(helpers);
  for (int t = 0; t < helpers; ++t) {
    threads->workers->Schedule([&]() {
      worker();
      done.DecrementCount();
    });
  }
  worker();
  done.Wait();
}

struct Job {
  float* w;
  float* v;
  const float* g;
  int64_t n;
  bool adapt;
  bool decay;
  float factor;
};

class TrustMomentumOp : public OpKernel {
 public:
  explicit TrustMomentumOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("adapt", &adapt_));
    OP_REQUIRES(ctx, static_cast<int>(adapt_.size()) == n_,
                absl::InvalidArgumentError("adapt must have one entry per variable"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("decay", &decay_));
    // No decay list: weight decay follows adapt (the variables LARS skips get neither).
    if (decay_.empty()) decay_ = adapt_;
    OP_REQUIRES(ctx, static_cast<int>(decay_.size()) == n_,
                absl::InvalidArgumentError("decay must have one entry per variable"));
    std::string mode;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("mode", &mode));
    mode_ = mode == "lars" ? Mode::kLars
                           : (mode == "larc_clip" ? Mode::kLarcClip : Mode::kLarcScale);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("momentum", &momentum_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_decay", &weight_decay_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("eeta", &eeta_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("min_update", &min_update_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &use_nesterov_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& lr_tensor = ctx->input(3 * n_);
    OP_REQUIRES(ctx, lr_tensor.NumElements() == 1,
                absl::InvalidArgumentError("learning_rate must be a scalar"));
    const float lr = lr_tensor.flat<float>()(0);

    std::vector<::tensorflow::core::RefCountPtr<Var>> vars;
    OP_REQUIRES_OK(ctx, LookupVariables(ctx, 2 * n_, &vars));
    VariableLocks locks(vars);
    OP_REQUIRES_OK(ctx, PrivateFloatBuffers(ctx, vars, "LargebatchTrustMomentum"));
    std::vector<Job> jobs(n_);
    std::vector<int64_t> sizes(n_);
    for (int i = 0; i < n_; ++i) {
      Tensor* w = vars[i]->tensor();
      Tensor* v = vars[n_ + i]->tensor();
      const Tensor& g = ctx->input(2 * n_ + i);
      OP_REQUIRES(ctx, w->shape().IsSameSize(v->shape()) && w->shape().IsSameSize(g.shape()),
                  absl::InvalidArgumentError(absl::StrCat(
                      "LargebatchTrustMomentum: variable ", i, " has shape ",
                      w->shape().DebugString(), ", its slot ", v->shape().DebugString(),
                      " and its gradient ", g.shape().DebugString())));
      jobs[i] = Job{w->flat<float>().data(), v->flat<float>().data(), g.flat<float>().data(),
                    w->NumElements(), static_cast<bool>(adapt_[i]),
                    static_cast<bool>(decay_[i]), 1.0f};
      sizes[i] = jobs[i].n;
    }
    RunLargestFirst(ctx, sizes, [&](int i) { Update(&jobs[i], lr); });

    Tensor* factors = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {n_}, &factors));
    auto out = factors->flat<float>();
    for (int i = 0; i < n_; ++i) out(i) = jobs[i].factor;
  }

 private:
  float Factor(const Job& job, float lr) const {
    if (!job.adapt) return 1.0f;
    const float w_norm = static_cast<float>(std::sqrt(SquaredSum(job.w, job.n)));
    const float g_norm = static_cast<float>(std::sqrt(SquaredSum(job.g, job.n)));
    switch (mode_) {
      case Mode::kLars:
        if (!(w_norm > 0.0f && g_norm > 0.0f)) return 1.0f;
        return eeta_ * w_norm / (g_norm + (job.decay ? weight_decay_ : 0.0f) * w_norm + epsilon_);
      case Mode::kLarcClip:
        if (!(w_norm > 0.0f && g_norm > 0.0f && lr > 0.0f)) return 1.0f;
        return std::min(std::max(eeta_ * w_norm / (lr * (g_norm + epsilon_)), min_update_),
                        1.0f);
      case Mode::kLarcScale:
        if (!(w_norm > 0.0f && g_norm > 0.0f)) return 1.0f;
        return std::max(eeta_ * w_norm / (g_norm + epsilon_), min_update_);
    }
    return 1.0f;
  }

  void Update(Job* job, float lr) const {
    job->factor = Factor(*job, lr);
    float* __restrict w = job->w;
    float* __restrict v = job->v;
    const float* __restrict g = job->g;
    const int64_t n = job->n;
    const float m = momentum_;
    if (mode_ == Mode::kLars) {
      const float s = job->adapt ? lr * job->factor : lr;
      const float wd = job->decay ? weight_decay_ : 0.0f;
      if (use_nesterov_) {
        for (int64_t i = 0; i < n; ++i) {
          const float step = s * (g[i] + wd * w[i]);
          const float vel = m * v[i] + step;
          v[i] = vel;
          w[i] -= step + m * vel;
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const float vel = m * v[i] + s * (g[i] + wd * w[i]);
          v[i] = vel;
          w[i] -= vel;
        }
      }
    } else {
      const float c = job->factor;
      if (use_nesterov_) {
        for (int64_t i = 0; i < n; ++i) {
          const float step = lr * (c * g[i]);
          const float vel = m * v[i] - step;
          v[i] = vel;
          w[i] += m * vel - step;
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const float vel = m * v[i] - lr * (c * g[i]);
          v[i] = vel;
          w[i] += vel;
        }
      }
    }
  }

  int n_ = 0;
  std::vector<bool> adapt_;
  std::vector<bool> decay_;
  Mode mode_ = Mode::kLars;
  float momentum_ = 0.0f;
  float weight_decay_ = 0.0f;
  float eeta_ = 0.0f;
  float epsilon_ = 0.0f;
  float min_update_ = 0.0f;
  bool use_nesterov_ = false;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("LargebatchTrustMomentum").Device(::tensorflow::DEVICE_CPU),
                        TrustMomentumOp);

// LAMB (optimizers/lamb.py) for N float32 variables, in place. For each
// variable, with c1 = 1 − β1^t and c2 = 1 − β2^t computed by the caller:
//   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   u = (m/c1) / (√(v/c2) + ε) + wd·w          (wd = 0 where decay is off)
//   r = ‖w‖/‖u‖ (1 when a norm is 0, or where adaptation is off)
//   w ← w − (lr·r)·u
// The first pass writes m and v, sums ‖w‖² and ‖u‖² and keeps u in a buffer
// of the worker thread's; the second pass reads u back from it (still in the
// cache: the variable's w and u were just touched) and writes w. Keeping u
// rather than recomputing it saves the second pass two divisions and a square
// root per element, and it reads u and w instead of m, v and w (a fifth of the
// update's time on ResNet-50). A variable above kMaxStored elements recomputes
// u instead, which bounds the buffers at 16 MB per thread; the values are the
// same either way. Output: r of every variable.
REGISTER_OP("LargebatchLamb")
    .Input("variables: N * resource")
    .Input("first_moments: N * resource")
    .Input("second_moments: N * resource")
    .Input("gradients: N * float")
    .Input("learning_rate: float")
    .Input("corrections: float")
    .Output("ratios: float")
    .Attr("N: int >= 1")
    .Attr("decay: list(bool)")
    .Attr("adapt: list(bool)")
    .Attr("beta_1: float")
    .Attr("one_minus_beta_1: float")
    .Attr("beta_2: float")
    .Attr("one_minus_beta_2: float")
    .Attr("epsilon: float")
    .Attr("weight_decay: float")
    .SetIsStateful()
    .SetShapeFn(OneValuePerVariable);

namespace {

struct LambJob {
  float* w;
  float* m;
  float* v;
  const float* g;
  int64_t n;
  bool decay;
  bool adapt;
  float ratio;
};

class LambOp : public OpKernel {
 public:
  explicit LambOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("decay", &decay_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("adapt", &adapt_));
    OP_REQUIRES(ctx, static_cast<int>(decay_.size()) == n_ && static_cast<int>(adapt_.size()) == n_,
                absl::InvalidArgumentError("decay and adapt need one entry per variable"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("beta_1", &beta_1_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("one_minus_beta_1", &one_minus_beta_1_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("beta_2", &beta_2_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("one_minus_beta_2", &one_minus_beta_2_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_decay", &weight_decay_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& lr_tensor = ctx->input(4 * n_);
    const Tensor& corrections = ctx->input(4 * n_ + 1);
    OP_REQUIRES(ctx, lr_tensor.NumElements() == 1 && corrections.NumElements() == 2,
                absl::InvalidArgumentError(
                    "learning_rate must be a scalar and corrections a 2-vector"));
    const float lr = lr_tensor.flat<float>()(0);
    const float c1 = corrections.flat<float>()(0);
    const float c2 = corrections.flat<float>()(1);

    std::vector<::tensorflow::core::RefCountPtr<Var>> vars;
    OP_REQUIRES_OK(ctx, LookupVariables(ctx, 3 * n_, &vars));
    VariableLocks locks(vars);
    OP_REQUIRES_OK(ctx, PrivateFloatBuffers(ctx, vars, "LargebatchLamb"));
    std::vector<LambJob> jobs(n_);
    for (int i = 0; i < n_; ++i) {
      Tensor* w = vars[i]->tensor();
      Tensor* m = vars[n_ + i]->tensor();
      Tensor* v = vars[2 * n_ + i]->tensor();
      const Tensor& g = ctx->input(3 * n_ + i);
      OP_REQUIRES(ctx, w->shape().IsSameSize(m->shape()) && w->shape().IsSameSize(v->shape()) &&
                       w->shape().IsSameSize(g.shape()),
                  absl::InvalidArgumentError(absl::StrCat(
                      "LargebatchLamb: variable ", i, " has shape ", w->shape().DebugString(),
                      " but a moment or its gradient does not")));
      jobs[i] = LambJob{w->flat<float>().data(), m->flat<float>().data(),
                        v->flat<float>().data(), g.flat<float>().data(), w->NumElements(),
                        static_cast<bool>(decay_[i]), static_cast<bool>(adapt_[i]), 1.0f};
    }
    std::vector<int64_t> sizes(n_);
    for (int i = 0; i < n_; ++i) sizes[i] = jobs[i].n;
    RunLargestFirst(ctx, sizes, [&](int i) { Update(&jobs[i], lr, c1, c2); });

    Tensor* ratios = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {n_}, &ratios));
    auto out = ratios->flat<float>();
    for (int i = 0; i < n_; ++i) out(i) = jobs[i].ratio;
  }

 private:
  // Variables up to this many elements keep u for the second pass.
  static constexpr int64_t kMaxStored = int64_t{1} << 22;

  // The calling thread's buffer of at least n floats, kept from call to call
  // (a fresh allocation of this size would cost page faults on every step).
  static float* Buffer(int64_t n) {
    thread_local std::vector<float> buffer;
    if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(n);
    return buffer.data();
  }

  float Direction(float m, float v, float w, float wd, float c1, float c2) const {
    return (m / c1) / (std::sqrt(v / c2) + epsilon_) + wd * w;
  }

  void Update(LambJob* job, float lr, float c1, float c2) const {
    float* __restrict w = job->w;
    float* __restrict m = job->m;
    float* __restrict v = job->v;
    const float* __restrict g = job->g;
    const int64_t n = job->n;
    const float wd = job->decay ? weight_decay_ : 0.0f;
    const float b1 = beta_1_, b2 = beta_2_, a1 = one_minus_beta_1_, a2 = one_minus_beta_2_;
    const bool stored = n <= kMaxStored;
    float* __restrict u_kept = stored ? Buffer(n) : nullptr;
    constexpr int kLanes = 16;
    double w_acc[kLanes] = {}, u_acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      float u[kLanes];
      for (int k = 0; k < kLanes; ++k) {
        const float gi = g[i + k];
        const float mi = b1 * m[i + k] + a1 * gi;
        const float vi = b2 * v[i + k] + a2 * (gi * gi);
        m[i + k] = mi;
        v[i + k] = vi;
        const float wi = w[i + k];
        u[k] = Direction(mi, vi, wi, wd, c1, c2);
        w_acc[k] += static_cast<double>(wi) * wi;
        u_acc[k] += static_cast<double>(u[k]) * u[k];
      }
      if (stored) std::memcpy(u_kept + i, u, sizeof(u));
    }
    for (; i < n; ++i) {
      const float gi = g[i];
      const float mi = b1 * m[i] + a1 * gi;
      const float vi = b2 * v[i] + a2 * (gi * gi);
      m[i] = mi;
      v[i] = vi;
      const float u = Direction(mi, vi, w[i], wd, c1, c2);
      if (stored) u_kept[i] = u;
      w_acc[0] += static_cast<double>(w[i]) * w[i];
      u_acc[0] += static_cast<double>(u) * u;
    }
    float ratio = 1.0f;
    if (job->adapt) {
      double w_sum = 0, u_sum = 0;
      for (int k = 0; k < kLanes; ++k) {
        w_sum += w_acc[k];
        u_sum += u_acc[k];
      }
      const float w_norm = static_cast<float>(std::sqrt(w_sum));
      const float u_norm = static_cast<float>(std::sqrt(u_sum));
      if (w_norm > 0.0f && u_norm > 0.0f) ratio = w_norm / u_norm;
    }
    job->ratio = ratio;
    const float step = lr * ratio;
    if (stored) {
      for (int64_t j = 0; j < n; ++j) w[j] -= step * u_kept[j];
    } else {
      for (int64_t j = 0; j < n; ++j) w[j] -= step * Direction(m[j], v[j], w[j], wd, c1, c2);
    }
  }

  int n_ = 0;
  std::vector<bool> decay_;
  std::vector<bool> adapt_;
  float beta_1_ = 0.0f, one_minus_beta_1_ = 0.0f, beta_2_ = 0.0f, one_minus_beta_2_ = 0.0f;
  float epsilon_ = 0.0f, weight_decay_ = 0.0f;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("LargebatchLamb").Device(::tensorflow::DEVICE_CPU), LambOp);


// The statistics optimize_loss takes of one update's gradients before it is
// applied (stages 4 and 5 of docs/math.md), for N float32 tensors in one pass each:
//   all_finite   no element is NaN or ±inf
//   amax         max |g| over all elements (+inf unless all_finite; 0 for none)
//   global_norm  √(Σ g²) over all elements, summed in double
// The tensor-op path (automatic_loss_scaler.gradient_stats and
// stages.global_norm) takes three passes and a few ops per tensor for the same.
REGISTER_OP("LargebatchGradientStats")
    .Input("gradients: N * float")
    .Output("all_finite: bool")
    .Output("amax: float")
    .Output("global_norm: float")
    .Attr("N: int >= 0")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 0; i < 3; ++i) c->set_output(i, c->Scalar());
      return absl::OkStatus();
    });

namespace {

struct TensorStats {
  bool finite = true;
  float amax = 0.0f;
  double squares = 0.0;
};

// One tensor's statistics. |x| <= FLT_MAX is false for NaN and ±inf, so the
// finite test is a comparison the compiler can vectorise with the rest.
TensorStats Stats(const float* __restrict x, int64_t n) {
  constexpr int kLanes = 16;
  constexpr float kLargest = std::numeric_limits<float>::max();
  double acc[kLanes] = {};
  float top[kLanes] = {};
  int bad[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float a = std::fabs(x[i + k]);
      bad[k] |= !(a <= kLargest);
      top[k] = a > top[k] ? a : top[k];
      acc[k] += static_cast<double>(x[i + k]) * x[i + k];
    }
  }
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    bad[0] |= !(a <= kLargest);
    top[0] = a > top[0] ? a : top[0];
    acc[0] += static_cast<double>(x[i]) * x[i];
  }
  TensorStats stats;
  for (int k = 0; k < kLanes; ++k) {
    stats.finite = stats.finite && !bad[k];
    stats.amax = std::max(stats.amax, top[k]);
    stats.squares += acc[k];
  }
  return stats;
}

class GradientStatsOp : public OpKernel {
 public:
  explicit GradientStatsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<TensorStats> stats(n_);
    std::vector<int64_t> sizes(n_);
    for (int i = 0; i < n_; ++i) sizes[i] = ctx->input(i).NumElements();
    RunLargestFirst(ctx, sizes, [&](int i) {
      stats[i] = Stats(ctx->input(i).flat<float>().data(), sizes[i]);
    });
    TensorStats total;
    for (const auto& s : stats) {
      total.finite = total.finite && s.finite;
      total.amax = std::max(total.amax, s.amax);
      total.squares += s.squares;
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {}, &out));
    out->scalar<bool>()() = total.finite;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, {}, &out));
    out->scalar<float>()() =
        total.finite ? total.amax : std::numeric_limits<float>::infinity();
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, {}, &out));
    out->scalar<float>()() = static_cast<float>(std::sqrt(total.squares));
  }

 private:
  int n_ = 0;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("LargebatchGradientStats").Device(::tensorflow::DEVICE_CPU),
                        GradientStatsOp);

}  // namespace largebatch
