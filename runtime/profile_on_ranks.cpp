#include "runtime/profile_on_ranks.hpp"

#include <string>
#include <vector>

#include "runtime/mpi_support.hpp"

namespace spw {

namespace {

Result<sched::ModelProfile> median_of_texts(const std::string& all, const std::vector<int>& lengths,
                                            const std::vector<int>& offsets) {
  std::vector<sched::ModelProfile> profiles;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    SPW_ASSIGN_OR_RETURN(sched::ModelProfile profile,
                         sched::profile_from_json(
                             std::string_view(all).substr(static_cast<std::size_t>(offsets[r]),
                                                          static_cast<std::size_t>(lengths[r])),
                             "profile of rank " + std::to_string(r)));
    profiles.push_back(std::move(profile));
  }
  return sched::median_profile(profiles);
}

}  // namespace

Result<sched::ModelProfile> profile_on_all_ranks(const TrainSettings& settings,
                                                 const ProfileOptions& options, MPI_Comm comm) {
  int rank = 0, size = 1;
  SPW_TRY(mpi_check(MPI_Comm_rank(comm, &rank), "profiling on every rank"));
  SPW_TRY(mpi_check(MPI_Comm_size(comm, &size), "profiling on every rank"));
  // Start together, so every rank's passes overlap the others'.
  SPW_TRY(mpi_check(MPI_Barrier(comm), "profiling on every rank"));
  auto mine = profile_model(settings, options);
  SPW_TRY(agree_on_status(comm, mine.status()));
  if (size == 1) return mine;

  // Profiles travel as their JSON text: every digit of a double survives.
  const std::string text = sched::profile_to_json(*mine);
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(rank == 0 ? static_cast<std::size_t>(size) : 0);
  SPW_TRY(mpi_check(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm),
                    "gathering profiles"));
  std::vector<int> offsets(lengths.size(), 0);
  for (std::size_t r = 1; r < lengths.size(); ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(rank == 0 ? static_cast<std::size_t>(offsets.back() + lengths.back()) : 0, '\0');
  SPW_TRY(mpi_check(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(),
                                offsets.data(), MPI_CHAR, 0, comm),
                    "gathering profiles"));
  // Rank 0 combines; what it finds wrong every rank must hear, or the others would go on
  // into the next collective alone.
  Result<sched::ModelProfile> combined = mine;
  if (rank == 0) combined = median_of_texts(all, lengths, offsets);
  SPW_TRY(agree_on_status(comm, combined.status()));
  return combined;
}

}  // namespace spw
