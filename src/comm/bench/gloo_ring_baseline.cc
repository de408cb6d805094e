#include "comm/bench/gloo_ring_baseline.h"

#include <net/if.h>
#include <unistd.h>

#include <climits>
#include <cstdint>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "comm/gloo/gloo_errors.h"
#include "comm/gloo/gloo_store.h"

namespace cohort::comm::bench {

namespace {

class GlooRingBaselineImpl final : public GlooRingBaseline {
 public:
  GlooRingBaselineImpl(std::shared_ptr<::gloo::rendezvous::Context> context, Millis timeout)
      : context_(std::move(context)), timeout_(timeout) {}

  Result<void> AllReduceSum(void* buf, size_t count, DataType type) override {
    if (count == 0) return {};
    try {
      ::gloo::AllreduceOptions opts(context_);
      opts.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
      switch (type) {
        case DataType::kFloat32: Bind<float>(opts, buf, count); break;
        case DataType::kInt32: Bind<int32_t>(opts, buf, count); break;
        case DataType::kInt64: Bind<int64_t>(opts, buf, count); break;
        default:
          return Errorf(ErrorCode::kInvalidArgument, "gloo ring baseline: {} is not supported",
                        DataTypeName(type));
      }
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      ::gloo::allreduce(opts);
    } catch (const std::exception& e) {
      return Errorf(ErrorCode::kUnavailable, "gloo ring allreduce failed: {}",
                    gloo_backend::CleanGlooMessage(e.what()));
    }
    return {};
  }

  Result<void> Barrier() override {
    try {
      ::gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      ::gloo::barrier(opts);
    } catch (const std::exception& e) {
      return Errorf(ErrorCode::kUnavailable, "gloo barrier failed: {}",
                    gloo_backend::CleanGlooMessage(e.what()));
    }
    return {};
  }

 private:
  template <typename T>
  static void Bind(::gloo::AllreduceOptions& opts, void* buf, size_t count) {
    opts.setOutput(static_cast<T*>(buf), count);
    void (*fn)(void*, const void*, const void*, size_t) = &::gloo::sum<T>;
    opts.setReduceFunction(fn);
  }

  std::shared_ptr<::gloo::rendezvous::Context> context_;
  Millis timeout_;
  uint32_t next_tag_ = 1;
};

}  // namespace

bool GlooRingBaseline::Supports(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kInt32 || type == DataType::kInt64;
}

Result<std::unique_ptr<GlooRingBaseline>> GlooRingBaseline::Connect(
    std::shared_ptr<Store> store, const std::string& key_prefix, int rank, int size,
    Millis timeout, const std::string& iface_host) {
  try {
    ::gloo::transport::tcp::attr attr;
    if (!iface_host.empty() && if_nametoindex(iface_host.c_str()) != 0) {
      attr.iface = iface_host;
    } else if (!iface_host.empty()) {
      attr.hostname = iface_host;
    } else {
      char name[HOST_NAME_MAX + 1] = {};
      if (gethostname(name, sizeof(name) - 1) != 0) {
        return Errorf(ErrorCode::kUnavailable, "gloo ring baseline: gethostname failed");
      }
      attr.hostname = name;
    }
    auto device = ::gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    gloo_backend::GlooStore gloo_store(std::move(store), key_prefix, timeout, size);
    context->connectFullMesh(gloo_store, device);
    return std::unique_ptr<GlooRingBaseline>(new GlooRingBaselineImpl(std::move(context), timeout));
  } catch (const gloo_backend::StoreFailure& e) {
    return std::unexpected(WithContext(e.error, "gloo ring baseline rendezvous"));
  } catch (const std::exception& e) {
    return Errorf(ErrorCode::kUnavailable, "gloo ring baseline rendezvous failed: {}",
                  gloo_backend::CleanGlooMessage(e.what()));
  }
}

}  // namespace cohort::comm::bench
