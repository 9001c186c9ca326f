/* spillway.h is strict C99 (compiled with -std=c99 -pedantic-errors -Wall -Wextra -Werror)
 * and every function it declares links against libspillway.so: this program takes each
 * one's address, with its exact prototype, and prints how many it found. */
#include <spillway/spillway.h>
#include <stdio.h>

int main(void) {
  int linked = 0;
  const char* (*status_string)(spw_status) = spw_status_string;
  const char* (*last_error)(void) = spw_last_error;
  spw_status (*get_version)(int*, int*, int*) = spw_get_version;
  spw_status (*session_create)(MPI_Comm, spw_session*) = spw_session_create;
  spw_status (*session_create_f)(MPI_Fint, spw_session*) = spw_session_create_f;
  spw_status (*session_rank)(spw_session, int*) = spw_session_rank;
  spw_status (*session_size)(spw_session, int*) = spw_session_size;
  spw_status (*session_free)(spw_session) = spw_session_free;
  spw_status (*job_create)(spw_job*) = spw_job_create;
  spw_status (*job_create_from_file)(const char*, spw_job*) = spw_job_create_from_file;
  spw_status (*job_create_from_string)(const char*, spw_job*) = spw_job_create_from_string;
  spw_status (*job_set)(spw_job, const char*, const char*) = spw_job_set;
  spw_status (*job_set_input)(spw_job, int) = spw_job_set_input;
  spw_status (*job_add_dense)(spw_job, int) = spw_job_add_dense;
  spw_status (*job_add_transformer_blocks)(spw_job, int) = spw_job_add_transformer_blocks;
  spw_status (*job_check)(spw_job) = spw_job_check;
  spw_status (*job_free)(spw_job) = spw_job_free;
  spw_status (*trainer_create)(spw_session, spw_job, spw_trainer*) = spw_trainer_create;
  spw_status (*trainer_describe_plan)(spw_trainer, char*, size_t, size_t*) =
      spw_trainer_describe_plan;
  spw_status (*trainer_train)(spw_trainer, int64_t) = spw_trainer_train;
  spw_status (*trainer_steps_done)(spw_trainer, int64_t*) = spw_trainer_steps_done;
  spw_status (*trainer_loss)(spw_trainer, double*) = spw_trainer_loss;
  spw_status (*trainer_throughput)(spw_trainer, double*) = spw_trainer_throughput;
  spw_status (*trainer_peak_memory)(spw_trainer, uint64_t*) = spw_trainer_peak_memory;
  spw_status (*trainer_save_checkpoint)(spw_trainer, const char*) = spw_trainer_save_checkpoint;
  spw_status (*trainer_load_checkpoint)(spw_trainer, const char*) = spw_trainer_load_checkpoint;
  spw_status (*trainer_free)(spw_trainer) = spw_trainer_free;
  void (*request_stop)(int) = spw_request_stop;
  spw_status (*catch_stop_signals)(void) = spw_catch_stop_signals;
  spw_status (*trainer_stop_signal)(spw_trainer, int*) = spw_trainer_stop_signal;

  linked += status_string != NULL;
  linked += last_error != NULL;
  linked += get_version != NULL;
  linked += session_create != NULL;
  linked += session_create_f != NULL;
  linked += session_rank != NULL;
  linked += session_size != NULL;
  linked += session_free != NULL;
  linked += job_create != NULL;
  linked += job_create_from_file != NULL;
  linked += job_create_from_string != NULL;
  linked += job_set != NULL;
  linked += job_set_input != NULL;
  linked += job_add_dense != NULL;
  linked += job_add_transformer_blocks != NULL;
  linked += job_check != NULL;
  linked += job_free != NULL;
  linked += trainer_create != NULL;
  linked += trainer_describe_plan != NULL;
  linked += trainer_train != NULL;
  linked += trainer_steps_done != NULL;
  linked += trainer_loss != NULL;
  linked += trainer_throughput != NULL;
  linked += trainer_peak_memory != NULL;
  linked += trainer_save_checkpoint != NULL;
  linked += trainer_load_checkpoint != NULL;
  linked += trainer_free != NULL;
  linked += request_stop != NULL;
  linked += catch_stop_signals != NULL;
  linked += trainer_stop_signal != NULL;
  printf("%d functions linked; %s\n", linked, status_string(SPW_OK));
  return linked == 30 ? 0 : 1;
}
