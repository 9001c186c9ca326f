! An installed spillway from Fortran (module spillway, legacy `use mpi` communicator).
! Prints "consumer_fortran: loss X" on rank 0; stops with an error on any failure.
program consumer_fortran
  use, intrinsic :: iso_c_binding, only: c_double
  use mpi
  use spillway
  implicit none
  type(spw_session) :: session
  type(spw_job) :: job
  type(spw_trainer) :: trainer
  integer :: ierror, provided, rank
  real(c_double) :: loss

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierror)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierror)
  call spw_session_create(MPI_COMM_WORLD, session, ierror)
  call check()
  call spw_job_create(job, ierror)
  call check()
  call spw_job_set_input(job, 16, ierror)
  call check()
  call spw_job_add_dense(job, 32, ierror)
  call check()
  call spw_job_add_dense(job, 32, ierror)
  call check()
  call spw_job_add_dense(job, 4, ierror)
  call check()
  call spw_job_set(job, 'data.source', 'synthetic', ierror)
  call check()
  call spw_job_set(job, 'parallel.stages', '2', ierror)
  call check()
  call spw_trainer_create(session, job, trainer, ierror)
  call check()
  call spw_trainer_train(trainer, 2, ierror)
  call check()
  call spw_trainer_loss(trainer, loss, ierror)
  call check()
  if (rank == 0) print '(a, f0.4)', 'consumer_fortran: loss ', loss
  call spw_trainer_free(trainer)
  call spw_job_free(job)
  call spw_session_free(session)
  call MPI_Finalize(ierror)

contains

  subroutine check()
    if (ierror /= SPW_OK) then
      print '(a)', 'consumer_fortran: ' // spw_last_error()
      error stop 1
    end if
  end subroutine check

end program consumer_fortran
