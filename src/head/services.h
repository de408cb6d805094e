// Services: deploying, scaling, listing and removing inference services (api/service.h)
// over the Cluster. A service is its replica jobs (JobSpec::service): deploy submits
// `replicas` of them, scale submits more (copies of a running one's spec) or cancels the
// newest, rm cancels them all, and the list groups the active ones by service, each
// replica with the gateway's view of it. Nothing else is stored, but for a service scaled
// to 0 (as kubectl scale --replicas=0 keeps a Deployment): its replica spec is kept in the
// Cluster's meta (kZeroReplicaServicesMeta), it is listed with no replicas, the gateway
// answers 503 for its model, and scale N starts N replicas of that spec again.
//
// Threads: any; deploy, scale and rm are serialized among themselves (two scales of one
// service at once must not both add replicas).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "api/service.h"
#include "common/error.h"
#include "common/mutex.h"
#include "head/auth.h"

namespace cohort::head {

// The Cluster meta key of the services scaled to 0: a JSON object, name -> {"spec": a
// replica's JobSpec, "created": when it was deployed (Unix seconds)}.
inline constexpr char kZeroReplicaServicesMeta[] = "services.zero_replicas";

class Cluster;
class Gateway;

// A service scaled to 0 as the Cluster's meta keeps it: its replica spec and deploy time.
struct IdleService {
  api::JobSpec spec;
  int64_t created = 0;
};
// The services scaled to 0, by name, read from `cluster`'s meta; none when it cannot be
// read (logged). Services and the gateway (which answers 503 for their models) read it.
std::map<std::string, IdleService> ScaledToZeroServices(Cluster& cluster);

class Services {
 public:
  Services(Cluster& cluster, Gateway& gateway) : cluster_(cluster), gateway_(gateway) {}

  // kAlreadyExists when a service of that name has replicas; the Cluster's errors
  // (kUnsatisfiable: no node could run a replica) with every replica made so far cancelled.
  Result<api::ServiceStatus> Deploy(api::ServiceSpec spec) EXCLUDES(mu_);
  // kNotFound for a service no one deployed (or removed); kPermissionDenied unless
  // `caller` owns it (or is an admin). 0 cancels every replica and keeps the service.
  Result<api::ServiceStatus> Scale(const std::string& name, int replicas, const Caller& caller) EXCLUDES(mu_);
  Result<api::ServiceStatus> Remove(const std::string& name, const Caller& caller) EXCLUDES(mu_);
  std::vector<api::ServiceStatus> List() const;
  Result<api::ServiceStatus> Get(const std::string& name) const;

 private:
  // The active (PENDING or RUNNING) replica jobs of each service, oldest first.
  std::map<std::string, std::vector<api::Job>> Active() const;
  api::ServiceStatus StatusOf(const std::string& name, const std::vector<api::Job>& jobs) const;
  using Idle = IdleService;
  std::map<std::string, Idle> ScaledToZero() const { return ScaledToZeroServices(cluster_); }
  Result<void> SaveScaledToZero(const std::map<std::string, Idle>& idle);
  static api::ServiceStatus IdleStatus(const std::string& name, const Idle& idle);

  Cluster& cluster_;
  Gateway& gateway_;  // told to look again after each change
  Mutex mu_;  // serializes Deploy, Scale and Remove
};

}  // namespace cohort::head
