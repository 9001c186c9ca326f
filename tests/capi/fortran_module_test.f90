! fortran_module_test: what module spillway adds over the C ABI: ierror carries the C
! status, the handles go back to null after a free, strings cross both ways (keys, TOML,
! the plan text, messages), and a failure without ierror is reported on error_unit while
! the program carries on.
!   mpiexec -n 1 fortran_module_test     (prints "N checks, 0 failed"; exit 0 when all pass)
program fortran_module_test
  use, intrinsic :: iso_c_binding, only: c_associated, c_double, c_int64_t
  use mpi_f08
  use spillway
  implicit none
  type(spw_session) :: session
  type(spw_job) :: job, never_created
  type(spw_trainer) :: trainer
  character(len=:), allocatable :: plan
  integer :: ierror, provided, major, minor, patch, checks, failures, stop_signal
  integer(c_int64_t) :: steps
  real(c_double) :: loss

  checks = 0
  failures = 0
  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided)

  call spw_get_version(major, minor, patch, ierror)
  call check(ierror == SPW_OK .and. major == 0 .and. minor == 1, 'spw_get_version')
  call check(spw_status_string(SPW_ERR_CONFIG) == 'configuration error', 'spw_status_string')

  ! Bad input: the status in ierror and the message in spw_last_error.
  call spw_job_set(never_created, 'train.lr', '0.1', ierror)
  call check(ierror == SPW_ERR_NULL_HANDLE, 'a null job is SPW_ERR_NULL_HANDLE')
  call check(index(spw_last_error(), 'spw_job_set: job is NULL') == 1, 'and says so')
  call spw_session_create(-5, session, ierror)
  call check(ierror == SPW_ERR_INVALID_ARGUMENT, 'a bad communicator')
  call check(.not. c_associated(session%ptr), 'leaves the session null')

  call spw_session_create(MPI_COMM_WORLD%MPI_VAL, session, ierror)
  call check(ierror == SPW_OK, 'spw_session_create')
  call spw_job_create(job, ierror)
  call check(ierror == SPW_OK .and. spw_last_error() == '', 'spw_job_create')
  call spw_job_set(job, 'train.lrr', '0.1', ierror)
  call check(ierror == SPW_ERR_CONFIG, 'an unknown key')
  call check(index(spw_last_error(), "did you mean 'train.lr'") > 0, 'is named with a fix')
  ! Without ierror: one line on error_unit (ctest matches it) and the program goes on.
  call spw_job_set(job, 'train.lrr', '0.1')
  call check(index(spw_last_error(), 'unknown key') > 0, 'a failure without ierror continues')

  ! Fixed-length Fortran strings lose their trailing blanks on the way in.
  call spw_job_set(job, 'model.d_model       ', '32   ', ierror)
  call check(ierror == SPW_OK, 'trailing blanks are trimmed')
  call spw_job_set(job, 'model.heads', '2', ierror)
  call spw_job_set(job, 'model.seq', '16', ierror)
  call spw_job_set(job, 'data.source', 'synthetic', ierror)
  call spw_job_set(job, 'train.batch', '4', ierror)
  call spw_job_set(job, 'parallel.stages', '1', ierror)
  call spw_job_add_transformer_blocks(job, 1, ierror)
  call check(ierror == SPW_OK, 'spw_job_add_transformer_blocks')
  call spw_job_check(job, ierror)
  call check(ierror == SPW_OK, 'spw_job_check')

  call spw_trainer_create(session, job, trainer, ierror)
  call check(ierror == SPW_OK, 'spw_trainer_create')
  call spw_trainer_describe_plan(trainer, plan, ierror)
  call check(ierror == SPW_OK .and. plan == '1 stage x 1 replica, 1f1b, 1 microbatch of 4 per replica', &
      'the plan text comes back whole: "' // plan // '"')
  call spw_trainer_train(trainer, 0, ierror)
  call check(ierror == SPW_ERR_INVALID_ARGUMENT, 'zero steps')
  call spw_trainer_train(trainer, 2, ierror)
  call spw_trainer_steps_done(trainer, steps, ierror)
  call check(ierror == SPW_OK .and. steps == 2, 'two steps')
  call spw_trainer_loss(trainer, loss, ierror)
  call check(ierror == SPW_OK .and. loss > 5 .and. loss < 6.5, 'a loss near ln 256')
  call spw_trainer_evaluate(trainer, 2, loss, ierror)
  call check(ierror == SPW_OK .and. loss > 5 .and. loss < 6.5, 'a held-out loss near ln 256')
  call spw_trainer_evaluate(trainer, 0, loss, ierror)
  call check(ierror == SPW_ERR_INVALID_ARGUMENT, 'no batches is refused')
  call spw_catch_stop_signals(ierror)
  call check(ierror == SPW_OK, 'spw_catch_stop_signals')
  call spw_request_stop(10)
  call spw_trainer_train(trainer, 3, ierror)
  call spw_trainer_steps_done(trainer, steps, ierror)
  call check(ierror == SPW_OK .and. steps == 3, 'a stop request ends the next call after a step')
  call spw_trainer_stop_signal(trainer, stop_signal, ierror)
  call check(ierror == SPW_OK .and. stop_signal == 10, 'and says why')

  call spw_session_free(session, ierror)
  call check(ierror == SPW_ERR_BAD_STATE, 'the session outlives its trainers')
  call spw_trainer_free(trainer, ierror)
  call check(ierror == SPW_OK .and. .not. c_associated(trainer%ptr), 'a freed trainer is null')
  call spw_job_free(job, ierror)
  call check(ierror == SPW_OK .and. .not. c_associated(job%ptr), 'a freed job is null')
  call spw_session_free(session, ierror)
  call check(ierror == SPW_OK .and. .not. c_associated(session%ptr), 'a freed session is null')
  call MPI_Finalize()

  print '(i0, a, i0, a)', checks, ' checks, ', failures, ' failed'
  if (failures > 0) error stop 1

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    checks = checks + 1
    if (.not. ok) then
      failures = failures + 1
      print '(2a)', 'FAIL: ', what
    end if
  end subroutine check

end program fortran_module_test
