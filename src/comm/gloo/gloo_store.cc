#include "comm/gloo/gloo_store.h"

#include <utility>

#include <fmt/format.h>

namespace cohort::comm::gloo_backend {

GlooStore::GlooStore(std::shared_ptr<comm::Store> store, std::string key_prefix, Millis timeout,
                     int group_size)
    : store_(std::move(store)),
      key_prefix_(std::move(key_prefix)),
      timeout_(timeout),
      group_size_(group_size) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  own_value_size_ = data.size();
  if (store_ == nullptr) {
    local_[key] = data;
    return;
  }
  auto r = store_->Set(key_prefix_ + key, std::string(data.begin(), data.end()));
  if (!r) throw StoreFailure(std::move(r.error()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  std::vector<char> value;
  if (store_ == nullptr) {
    auto it = local_.find(key);
    if (it == local_.end()) {
      throw StoreFailure(Error(ErrorCode::kDeadlineExceeded,
                               "no rank set key '" + key_prefix_ + key + "' (group of one)"));
    }
    value = it->second;
  } else {
    auto r = store_->Get(key_prefix_ + key, timeout_);
    if (!r) throw StoreFailure(std::move(r.error()));
    value.assign(r->begin(), r->end());
  }
  if (own_value_size_ > 0 && group_size_ > 1 && value.size() != own_value_size_) {
    // Each rank publishes (its group size - 1) addresses of the same size.
    const size_t addr = own_value_size_ / static_cast<size_t>(group_size_ - 1);
    throw StoreFailure(Error(
        ErrorCode::kInvalidArgument,
        fmt::format("rank {} was created with world_size {} and this rank with {}: every rank "
                    "must pass the same world_size",
                    key, addr == 0 ? 0 : value.size() / addr + 1, group_size_)));
  }
  read_[key] = value;
  return value;
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  if (store_ == nullptr) {
    for (const auto& k : keys) {
      if (!local_.contains(k)) {
        throw StoreFailure(Error(ErrorCode::kDeadlineExceeded,
                                 "no rank set key '" + key_prefix_ + k + "' (group of one)"));
      }
    }
    return;
  }
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(key_prefix_ + k);
  auto r = store_->Wait(full, timeout.count() > 0 ? Millis(timeout.count()) : timeout_);
  if (!r) throw StoreFailure(std::move(r.error()));
}

}  // namespace cohort::comm::gloo_backend
