! fortran_driver: trains a small byte-level GPT on the fortunes corpus over the ranks of
! MPI_COMM_WORLD through spillway's Fortran module, prints the loss of every step and checks
! that it falls: the mean of the last 5 steps at least 1.0 below the first step's, and the
! loss on the corpus's held-out last 5% at least 1.0 below the untrained model's.
!
!   mpiexec -n 2 fortran_driver [STEPS]      (default 30; exit 0 when the loss fell)
!
! The job comes from TOML text, with one stage per rank set on top of it. SIGUSR1 or
! SIGTERM (a batch system's warning) stops it after the step in progress with a
! checkpoint, fortran_driver-stopped.h5, and exit status 75.
program fortran_driver
  use, intrinsic :: iso_c_binding, only: c_double, c_int64_t
  use, intrinsic :: iso_fortran_env, only: error_unit
  use mpi_f08
  use spillway
  implicit none

  character(len=*), parameter :: nl = new_line('a')
  character(len=*), parameter :: job_text = &
      '[model]' // nl // 'kind = "gpt"' // nl // 'layers = 2' // nl // 'd_model = 64' // nl // &
      'heads = 2' // nl // 'seq = 32' // nl // &
      '[data]' // nl // 'source = "text"' // nl // 'holdout = 0.05' // nl // &
      '[train]' // nl // 'batch = 8' // nl // 'microbatches = 4' // nl // 'lr = 3e-3' // nl
  type(spw_session) :: session
  type(spw_job) :: job
  type(spw_trainer) :: trainer
  character(len=32) :: argument
  character(len=:), allocatable :: plan
  integer :: provided, rank, size, steps, step, ierror, stop_signal
  real(c_double) :: first_loss, loss, last_losses, per_second, held_out_before, held_out_after
  integer(c_int64_t) :: peak

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided)
  steps = 30
  if (command_argument_count() > 0) then
    call get_command_argument(1, argument)
    read (argument, *) steps
  end if

  call spw_session_create(MPI_COMM_WORLD%MPI_VAL, session, ierror)
  call check()
  call spw_session_rank(session, rank, ierror)
  call check()
  call spw_session_size(session, size, ierror)
  call check()

  call spw_job_create_from_string(job_text, job, ierror)
  call check()
  write (argument, '(i0)') size
  call spw_job_set(job, 'parallel.stages', argument, ierror)
  call check()

  call spw_trainer_create(session, job, trainer, ierror)
  call check()
  call spw_trainer_describe_plan(trainer, plan, ierror)
  call check()
  if (rank == 0) print '(a, i0, 2a)', 'fortran_driver: ', size, ' ranks, plan: ', plan

  call spw_catch_stop_signals(ierror)
  call check()
  call spw_trainer_evaluate(trainer, 2, held_out_before, ierror)
  call check()

  first_loss = 0
  loss = 0
  last_losses = 0  ! summed over the last 5 steps
  held_out_after = 0
  stop_signal = 0
  do step = 1, steps
    call spw_trainer_train(trainer, 1, ierror)
    call check()
    call spw_trainer_stop_signal(trainer, stop_signal, ierror)
    call check()
    if (stop_signal /= 0) exit
    call spw_trainer_loss(trainer, loss, ierror)
    call check()
    if (step == 1) first_loss = loss
    if (step > steps - 5) last_losses = last_losses + loss
    if (rank == 0) print '(a, i0, a, f0.4)', 'step ', step, ' loss ', loss
  end do
  if (stop_signal /= 0) then
    ! Every rank got the same answer: all save together, and the job can resume from it.
    call spw_trainer_save_checkpoint(trainer, 'fortran_driver-stopped.h5', ierror)
    call check()
    if (rank == 0) print '(a, i0, a)', 'fortran_driver: stopped by signal ', stop_signal, &
        '; checkpoint fortran_driver-stopped.h5'
  else
    call spw_trainer_evaluate(trainer, 2, held_out_after, ierror)
    call check()
    call spw_trainer_throughput(trainer, per_second, ierror)
    call check()
    call spw_trainer_peak_memory(trainer, peak, ierror)
    call check()
    if (rank == 0) then
      print '(a, f0.4, a, f0.4, a, f0.4, a, f0.4, a, i0, a, f0.1, a)', &
          'fortran_driver: loss ', first_loss, ' -> ', loss, ', held out ', held_out_before, &
          ' -> ', held_out_after, ', median ', nint(per_second), ' tokens/s, peak ', &
          real(peak, c_double) / 1048576.0_c_double, ' MiB on rank 0'
    end if
  end if

  call spw_trainer_free(trainer, ierror)
  call check()
  call spw_job_free(job, ierror)
  call check()
  call spw_session_free(session, ierror)
  call check()
  call MPI_Finalize()
  if (stop_signal /= 0) error stop 75  ! EX_TEMPFAIL: run again from the checkpoint
  ! Every rank saw the same losses, so every rank reaches the same verdict. One step's loss
  ! is noisy (a hard batch); the mean of the last 5 is not.
  if (steps < 5 .or. .not. (last_losses / 5 < first_loss - 1.0_c_double) .or. &
      .not. (held_out_after < held_out_before - 1.0_c_double)) then
    if (rank == 0) write (error_unit, '(a)') &
        'fortran_driver: the loss did not fall by 1.0 (over at least 5 steps)'
    error stop 1
  end if

contains

  ! The driver owns the process, so it decides that a failure ends the job: MPI_Abort,
  ! because a rank that failed mid-step leaves its peers waiting.
  subroutine check()
    if (ierror /= SPW_OK) then
      write (error_unit, '(4a)') 'fortran_driver: ', spw_status_string(ierror), ': ', &
          spw_last_error()
      call MPI_Abort(MPI_COMM_WORLD, 1)
    end if
  end subroutine check

end program fortran_driver
