// spillway: the command line for batch jobs.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "runtime/evaluate_command.hpp"
#include "runtime/node_memory_budget.hpp"
#include "runtime/plan_command.hpp"
#include "runtime/profile_command.hpp"
#include "runtime/sample_command.hpp"
#include "runtime/stop_request.hpp"
#include "runtime/train_command.hpp"
#include "runtime/version.hpp"

namespace {

// MPI is initialised once per process by the driver, never by the library.
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiSession() { MPI_Finalize(); }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

// Whether this process is the job's first, from the launcher's environment: the command line
// is read before MPI starts, and every rank reads the same one, so only the first reports a
// mistake in it. Unknown (no launcher) counts as first.
bool first_of_launch() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) return std::string(value) == "0";
  }
  return true;
}

// A file argument every such command needs and checks before MPI starts.
void add_required_file(CLI::App* app, const std::string& name, std::string& path,
                       const std::string& description) {
  app->add_option(name, path, description)->required()->check(CLI::ExistingFile);
}

void add_job_file(CLI::App* app, std::string& path, const std::string& description) {
  add_required_file(app, "config", path, description);
}

// A count of at least one, for the int options below. CLI::PositiveNumber's message spells
// out its range up to the largest double (309 digits) and said "Value 0 not in range
// 0.000000 to ...".
const CLI::Validator kAtLeastOne(
    [](std::string& text) -> std::string {
      int value = 0;
      const char* end = text.data() + text.size();
      const auto [stop, error] = std::from_chars(text.data(), end, value);
      if (error == std::errc() && stop == end && value >= 1) return "";
      if (error == std::errc::result_out_of_range) return text + " is too large";
      return "must be a whole number of at least 1, got " + text;
    },
    "N >= 1");

int fail(const spw::Status& status) {
  std::fprintf(stderr, "spillway: error: %s\n", status.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "spillway: train neural networks that do not fit in one node's memory, as "
      "pipelines over MPI ranks"};
  app.set_version_flag("--version", std::string("spillway ") + spw::version_string());
  app.require_subcommand(1);

  spw::TrainCommand train;
  CLI::App* train_app = app.add_subcommand("train", "Run a job file to the end");
  train_app->footer(
      "SIGUSR1 or SIGTERM stops the run after the step in progress, on every rank, with a "
      "checkpoint and the report; it then exits with status 75. Go on with --resume.");
  add_job_file(train_app, train.config_path, "Job file (TOML)");
  train_app->add_option("--set", train.overrides,
                        "Override a job-file key, e.g. --set train.lr=0.01 (repeatable)");
  train_app
      ->add_option("--resume", train.resume_from,
                   "Continue exactly from a checkpoint written by an earlier run")
      ->check(CLI::ExistingFile);
  train_app->add_flag("--predict", train.predict,
                      "With a forced layout, also profile and measure links as stages = \"auto\" "
                      "does and record the planner's prediction beside the measured time");

  spw::EvaluateCommand evaluate;
  CLI::App* evaluate_app = app.add_subcommand(
      "evaluate", "The loss of a checkpoint on the job's held-out data, without training");
  add_job_file(evaluate_app, evaluate.config_path, "Job file (TOML)");
  add_required_file(evaluate_app, "--checkpoint", evaluate.checkpoint, "Checkpoint to evaluate");
  evaluate_app
      ->add_option("--batches", evaluate.batches,
                   "Held-out batches of train.batch samples (default: eval.batches)")
      ->check(kAtLeastOne);
  evaluate_app->add_option("--set", evaluate.overrides, "Override a job-file key (repeatable)");
  evaluate_app->add_option("--output", evaluate.output_path,
                           "Where to write the result (default: output.dir/eval.json)");

  spw::SampleCommand sample;
  CLI::App* sample_app =
      app.add_subcommand("sample", "Continue a prompt with a checkpoint of a GPT");
  add_job_file(sample_app, sample.config_path, "Job file (TOML) of the model");
  add_required_file(sample_app, "--checkpoint", sample.checkpoint, "Checkpoint to sample from");
  CLI::Option* prompt = sample_app->add_option("--prompt", sample.settings.prompt,
                                               "Text to continue (default: a newline)");
  sample_app
      ->add_option("--prompt-ids", sample.prompt_ids,
                   "Token ids to continue, for a model of a token file's vocabulary; the "
                   "output is ids too")
      ->excludes(prompt);
  sample_app
      ->add_option("--bytes,--tokens", sample.settings.bytes,
                   "Bytes (or tokens) to add (default 200)")
      ->check(kAtLeastOne);
  sample_app->add_option("--temperature", sample.settings.temperature,
                         "Below 1 sharper, above 1 flatter, 0 the likeliest byte (default 1)");
  sample_app->add_option("--top-k", sample.settings.top_k,
                         "Draw among the k likeliest bytes; 0: all (default)");
  sample_app->add_option("--seed", sample.settings.seed, "Random seed (default 1)");
  sample_app->add_option("--set", sample.overrides, "Override a job-file key (repeatable)");

  spw::ProfileCommand profile;
  CLI::App* profile_app =
      app.add_subcommand("profile", "Measure the job's model block by block for the planner");
  add_job_file(profile_app, profile.config_path, "Job file (TOML)");
  profile_app->add_option("--set", profile.overrides, "Override a job-file key (repeatable)");
  profile_app->add_option("--output", profile.output_path,
                          "Where to write the profile (default: output.dir/profile.json)");
  profile_app->add_option("--repeats", profile.repeats, "Timed runs per pass (median)")
      ->check(kAtLeastOne);

  spw::PlanCommand plan;
  CLI::App* plan_app = app.add_subcommand(
      "plan",
      "Plan the job for N ranks without running them: print the stages, their ranks, compute "
      "time and memory, the predicted iteration time and bubble, and write plan.json");
  add_job_file(plan_app, plan.config_path, "Job file (TOML)");
  plan_app->add_option("--ranks", plan.ranks, "Ranks to plan for")->required();
  plan_app->add_option(
      "--topology", plan.topology,
      "A link matrix file (JSON, see partition/rank_topology.hpp) or a synthetic spec "
      "NODESxRANKS[,intra=BW@LAT][,inter=BW@LAT][,cores=N][,memory=BYTES], e.g. "
      "4x8,inter=1.25e10@2e-6 (bytes/s@seconds). Default: N ranks on this node, with links "
      "from an earlier run of N ranks cached in output.dir, else 5e9 bytes/s and 1e-6 s "
      "(Open MPI shared memory as measured on the development VM), and hwloc's node facts");
  plan_app->add_option("--memory-cap", plan.memory_cap,
                       "Per-rank memory cap, bytes or e.g. 8GiB (default: memory.cap)");
  plan_app->add_option("--profile", plan.profile_path,
                       "A profile.json of this job's model and microbatch (default: measure now)");
  plan_app->add_option("--output", plan.output_path,
                       "Where to write the plan (default: output.dir/plan.json)");
  plan_app->add_option("--set", plan.overrides, "Override a job-file key (repeatable)");
  plan_app->add_option("--repeats", plan.repeats, "Timed runs per pass when profiling (median)")
      ->check(kAtLeastOne);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; a bad command line is one line in spillway's
    // words and exit status 2, as usage errors are for most Unix tools.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    if (!first_of_launch()) return 2;
    const std::vector<CLI::App*> given = app.get_subcommands();
    // CLI11 calls an unknown command a missing one.
    if (given.empty() && argc > 1 && argv[1][0] != '-') {
      std::string known;
      for (const CLI::App* sub : app.get_subcommands({})) {
        known += (known.empty() ? "" : ", ") + sub->get_name();
      }
      std::fprintf(stderr,
                   "spillway: error: unknown command '%s': the commands are %s (spillway "
                   "--help)\n",
                   argv[1], known.c_str());
      return 2;
    }
    const std::string help =
        given.empty() ? "spillway --help" : "spillway " + given.back()->get_name() + " --help";
    std::fprintf(stderr, "spillway: error: %s (%s lists the options)\n", e.what(), help.c_str());
    return 2;
  }

  MpiSession mpi(argc, argv);
  // Past a file-size limit (ulimit -f) the kernel kills a writer with SIGXFSZ, and a
  // checkpoint or report then ended the job with "File size limit exceeded". Ignored, the
  // write fails with EFBIG, which the writers report in a line and clean up after. Set here,
  // after MPI starts, since Open MPI gives its ranks the default action back.
  std::signal(SIGXFSZ, SIG_IGN);
  // A model too big for the node then fails with a message rather than at the OOM killer's
  // hand. Without the node's figures the job runs as it would have, unguarded.
  auto node_budget = spw::NodeMemoryBudgetScope::install(MPI_COMM_WORLD);
  if (!node_budget.ok() && mpi.rank() == 0) {
    std::fprintf(stderr, "spillway: note: no node memory budget: %s\n",
                 node_budget.status().message().c_str());
  }
  spw::Status status;
  spw::FailureScope scope = spw::FailureScope::all_ranks;
  bool stopped = false;  // by a stop request, after a checkpoint: spw::kExitStopped
  try {
    if (train_app->parsed()) {
      status = spw::catch_stop_signals();
      if (status.ok()) {
        const auto end = spw::run_train_command(train, MPI_COMM_WORLD, scope);
        status = end.status();
        stopped = end.ok() && *end == spw::RunEnd::stopped;
      }
    }
    if (evaluate_app->parsed()) {
      status = spw::run_evaluate_command(evaluate, MPI_COMM_WORLD, scope);
    }
    if (sample_app->parsed()) status = spw::run_sample_command(sample, MPI_COMM_WORLD, scope);
    // One process measures; under mpirun the other ranks have nothing to do.
    if (profile_app->parsed() && mpi.rank() == 0) status = spw::run_profile_command(profile);
    // Planning needs no ranks: under mpirun rank 0 plans alone.
    if (plan_app->parsed() && mpi.rank() == 0) status = spw::run_plan_command(plan);
  } catch (const std::exception& e) {
    // The library reports failures as Status; what still escapes (bad_alloc from a
    // container, say) is this rank's alone.
    status =
        spw::error(spw::StatusCode::internal, std::string("unexpected exception: ") + e.what());
    scope = spw::FailureScope::this_rank;
  }
  if (status.ok()) return stopped ? spw::kExitStopped : 0;
  if (scope == spw::FailureScope::this_rank && mpi.size() > 1) {
    // Peers may be blocked waiting on this rank: end the whole job now, not at a timeout.
    std::fprintf(stderr, "spillway: error: rank %d: %s\n", mpi.rank(), status.message().c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (mpi.rank() == 0) fail(status);
  return 1;
}
