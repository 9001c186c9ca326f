// A job as JSON, for report.json and plan.json: it re-reads as the same job.
#include <nlohmann/json.hpp>

#include "runtime/job_config.hpp"

namespace spw {

nlohmann::json to_json(const JobConfig& config) {
  using nlohmann::json;
  json out;

  const ModelConfig& model = config.model;
  json& model_json = out["model"];
  model_json["kind"] = std::string(to_string(model.kind));
  // Only the kind's own keys, so the report re-reads as a valid job.
  if (model.kind == ModelKind::gpt) {
    model_json["layers"] = model.layers;
    model_json["d_model"] = model.d_model;
    model_json["heads"] = model.heads;
    model_json["seq"] = model.seq;
    model_json["vocab"] = model.vocab;
    model_json["ln_eps"] = model.ln_eps;
    if (model.head_chunk_auto) {
      model_json["head_chunk_rows"] = "auto";
    } else {
      model_json["head_chunk_rows"] = model.head_chunk_rows;
    }
    if (model.split_layers_auto) {
      model_json["split_layers"] = "auto";
    } else if (!model.split_layers.empty()) {
      model_json["split_layers"] = model.split_layers;
    }
  } else {
    model_json["dims"] = model.dims;
  }

  out["data"] = {{"source", std::string(to_string(config.data.source))},
                 {"path", config.data.path},
                 {"holdout", config.data.holdout}};
  if (config.data.source == DataKind::tokens) out["data"]["token_bytes"] = config.data.token_bytes;
  out["eval"] = {{"every", config.eval.every}, {"batches", config.eval.batches}};

  const TrainConfig& train = config.train;
  json& train_json = out["train"];
  train_json["batch"] = train.batch;
  train_json["microbatches"] = train.microbatches;
  if (train.steps) train_json["steps"] = *train.steps;
  if (train.epochs) train_json["epochs"] = *train.epochs;
  train_json["optimizer"] = std::string(to_string(train.optimizer));
  train_json["lr"] = train.lr;
  train_json["momentum"] = train.momentum;
  train_json["beta1"] = train.beta1;
  train_json["beta2"] = train.beta2;
  train_json["eps"] = train.eps;
  train_json["weight_decay"] = train.weight_decay;
  train_json["seed"] = train.seed;
  train_json["init_from"] = train.init_from;
  train_json["lr_decay"] = std::string(to_string(train.lr_decay));
  train_json["warmup_steps"] = train.warmup_steps;
  if (train.decay_steps) train_json["decay_steps"] = *train.decay_steps;
  train_json["min_lr"] = train.min_lr;
  train_json["clip_grad_norm"] = train.clip_grad_norm;

  const ParallelConfig& parallel = config.parallel;
  json& parallel_json = out["parallel"];
  switch (parallel.stages.form) {
    case StagesSpec::Form::automatic: parallel_json["stages"] = "auto"; break;
    case StagesSpec::Form::count: parallel_json["stages"] = parallel.stages.count; break;
    case StagesSpec::Form::ranges: {
      json ranges = json::array();
      for (const StageRange& range : parallel.stages.ranges) {
        ranges.push_back(json::array({range.first, range.last}));
      }
      parallel_json["stages"] = std::move(ranges);
      break;
    }
  }
  parallel_json["replicas"] = parallel.replicas;
  parallel_json["schedule"] = std::string(to_string(parallel.schedule));
  parallel_json["chunks"] = parallel.chunks;
  parallel_json["layout"] = std::string(to_string(parallel.layout));

  const OffloadConfig& offload = config.offload;
  out["offload"] = {{"tier", std::string(to_string(offload.tier))},
                    {"keep", offload.keep},
                    {"lookahead", offload.lookahead},
                    {"verify", offload.verify},
                    {"dir", offload.dir}};
  if (offload.engine_pu == kEnginePuAuto || offload.engine_pu == kEnginePuNone) {
    out["offload"]["engine_pu"] = offload.engine_pu == kEnginePuAuto ? "auto" : "none";
  } else {
    out["offload"]["engine_pu"] = offload.engine_pu;
  }

  out["memory"] = json::object();
  if (config.memory.cap) out["memory"]["cap"] = *config.memory.cap;

  out["output"] = {{"dir", config.output.dir},
                   {"checkpoint_every", config.output.checkpoint_every},
                   {"keep_best", config.output.keep_best},
                   {"trace", config.output.trace}};
  out["threads"] = {{"count", config.threads.count}};
  return out;
}

}  // namespace spw
