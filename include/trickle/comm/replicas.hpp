// trickle/comm/replicas.hpp: replicas made of many ranks.
//
// At scale a DiLoCo or SPARTA "worker" is a replica of R ranks (a node or a pod): each rank
// holds a shard (FSDP, tensor parallelism) or a full copy (DDP). trickle then runs once per
// shard, over the cross-replica group of that shard (rank s of every replica), while the
// trainer's own data parallelism runs inside the replica. The world layout is the usual
// one: world rank w = replica * R + shard.
//
//   comm::replica_layout L(world_rank, world_size, ranks_per_replica);
//   L.replica(), L.shard()                 where this rank sits
//   L.within_color(), L.within_key()       MPI_Comm_split / NCCL split arguments of the
//   L.across_color(), L.across_key()       replica's group and of the shard's cross-replica group
//   L.across_ranks(), L.within_ranks()     the world ranks of each (torch.distributed.new_group)
//   L.shard_seed(seed)                     the seed of this shard's policies: shards differ,
//                                          replicas of a shard agree
//
// comm::split_replicas (comm/mpi.hpp) builds both groups over MPI; over torch.distributed,
// trickle.replica_groups (Python) calls new_group with across_ranks()/within_ranks(); over
// comm::elastic_group, each shard's cross-replica group is its own job (elastic_job(),
// with the replica index as the worker id), so a replica leaves and joins as a whole when
// all its ranks do (a replica that loses one rank must have its other ranks leave()).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/error.hpp>

#include <cstdint>
#include <string>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace comm {

class replica_layout {
public:
    replica_layout(int world_rank, int world_size, int ranks_per_replica)
        : rank_(world_rank), size_(world_size), per_(ranks_per_replica) {
        require(world_size >= 1, "comm::replica_layout: the world size must be >= 1, got ", world_size);
        require(world_rank >= 0 && world_rank < world_size, "comm::replica_layout: rank ", world_rank,
                " out of range [0, ", world_size, ")");
        require(ranks_per_replica >= 1 && world_size % ranks_per_replica == 0,
                "comm::replica_layout: ranks_per_replica (", ranks_per_replica,
                ") must be >= 1 and divide the world size (", world_size, ")");
    }

    int ranks_per_replica() const { return per_; }
    int replicas() const { return size_ / per_; }
    int replica() const { return rank_ / per_; }
    int shard() const { return rank_ % per_; }

    // The replica's own group: its ranks, ordered by shard.
    int within_color() const { return replica(); }
    int within_key() const { return shard(); }
    std::vector<int> within_ranks() const {
        std::vector<int> r;
        for (int s = 0; s < per_; ++s) r.push_back(replica() * per_ + s);
        return r;
    }
    // This shard's cross-replica group: rank shard() of every replica, ordered by replica.
    int across_color() const { return shard(); }
    int across_key() const { return replica(); }
    std::vector<int> across_ranks() const {
        std::vector<int> r;
        for (int q = 0; q < replicas(); ++q) r.push_back(q * per_ + shard());
        return r;
    }

    // A seed of this shard's own, the same on every replica: the shards of one replica then
    // draw different SPARTA selections and streaming fragments, while the replicas of a
    // shard draw the same. Shard 0 keeps `seed` (a single-rank replica is unchanged).
    std::uint64_t shard_seed(std::uint64_t seed) const {
        return shard() == 0 ? seed : mix64(seed ^ (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(shard())));
    }

    // The job name of this shard's cross-replica elastic_group ("<prefix>-shard<s>").
    std::string elastic_job(const std::string& prefix = "trickle") const {
        return prefix + "-shard" + std::to_string(shard());
    }

private:
    int rank_, size_, per_;
};

} // namespace comm

TRICKLE_NAMESPACE_END
