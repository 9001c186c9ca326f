#include "runtime/profile_on_ranks.hpp"

#include <string>
#include <vector>

#include "runtime/mpi_support.hpp"

namespace spw {

namespace {

Result<sched::ModelProfile> median_of_texts(const std::vector<std::string>& texts) {
  std::vector<sched::ModelProfile> profiles;
  for (std::size_t r = 0; r < texts.size(); ++r) {
    SPW_ASSIGN_OR_RETURN(
        sched::ModelProfile profile,
        sched::profile_from_json(texts[r], "profile of rank " + std::to_string(r)));
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
  SPW_ASSIGN_OR_RETURN(std::vector<std::string> texts,
                       gather_strings(comm, sched::profile_to_json(*mine)));
  // Rank 0 combines; what it finds wrong every rank must hear, or the others would go on
  // into the next collective alone.
  Result<sched::ModelProfile> combined = mine;
  if (rank == 0) combined = median_of_texts(texts);
  SPW_TRY(agree_on_status(comm, combined.status()));
  return combined;
}

}  // namespace spw
