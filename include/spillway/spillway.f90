! spillway.f90: the Fortran 2008 interface to spillway (module spillway), over the C ABI in
! spillway.h. The same functions as subroutines with the same names and arguments, and a
! trailing optional `ierror`:
!
!   use mpi_f08
!   use spillway
!   type(spw_session) :: session
!   type(spw_job) :: job
!   type(spw_trainer) :: trainer
!   real(c_double) :: loss
!   call spw_session_create(MPI_COMM_WORLD%MPI_VAL, session, ierror)  ! `use mpi`: MPI_COMM_WORLD
!   call spw_job_create_from_file('gpt.toml', job, ierror)
!   call spw_trainer_create(session, job, trainer, ierror)
!   call spw_trainer_train(trainer, 10, ierror)
!   call spw_trainer_loss(trainer, loss, ierror)
!
! ierror receives the spw_status code (SPW_OK = 0). Without ierror, a failure writes
! "spillway: <message>" to error_unit and the program continues: spillway never stops the
! caller's program, so pass ierror wherever a failure must change what happens next.
! Every code, its meaning and the state after a failure are documented in spillway.h.
!
! Communicators are Fortran handles (MPI_Fint, a default integer), converted with
! MPI_Comm_f2c inside the library, so this module does not depend on an MPI module.
! Character arguments are passed without trailing blanks (trim).
module spillway
  use, intrinsic :: iso_c_binding, only: c_int, c_int64_t, c_double, c_char, c_size_t, &
                                         c_ptr, c_null_ptr, c_null_char, c_associated, &
                                         c_f_pointer, c_loc
  use, intrinsic :: iso_fortran_env, only: error_unit
  implicit none
  private

  integer, parameter, public :: SPW_OK = 0
  integer, parameter, public :: SPW_ERR_INVALID_ARGUMENT = 1
  integer, parameter, public :: SPW_ERR_SHAPE_MISMATCH = 2
  integer, parameter, public :: SPW_ERR_OUT_OF_MEMORY = 3
  integer, parameter, public :: SPW_ERR_MEMORY_CAP = 4
  integer, parameter, public :: SPW_ERR_IO = 5
  integer, parameter, public :: SPW_ERR_NOT_FOUND = 6
  integer, parameter, public :: SPW_ERR_UNSUPPORTED = 7
  integer, parameter, public :: SPW_ERR_CONFIG = 8
  integer, parameter, public :: SPW_ERR_COMMUNICATION = 9
  integer, parameter, public :: SPW_ERR_INTERNAL = 10
  integer, parameter, public :: SPW_ERR_NULL_HANDLE = 11
  integer, parameter, public :: SPW_ERR_BAD_STATE = 12

  ! Handles: null until created, null again after a successful free.
  type, public :: spw_session
    type(c_ptr) :: ptr = c_null_ptr
  end type spw_session
  type, public :: spw_job
    type(c_ptr) :: ptr = c_null_ptr
  end type spw_job
  type, public :: spw_trainer
    type(c_ptr) :: ptr = c_null_ptr
  end type spw_trainer

  public :: spw_status_string, spw_last_error, spw_get_version
  public :: spw_session_create, spw_session_rank, spw_session_size, spw_session_free
  public :: spw_job_create, spw_job_create_from_file, spw_job_create_from_string, spw_job_set, &
            spw_job_set_input, spw_job_add_dense, spw_job_add_transformer_blocks, &
            spw_job_check, spw_job_free
  public :: spw_trainer_create, spw_trainer_describe_plan, spw_trainer_train, &
            spw_trainer_steps_done, spw_trainer_loss, spw_trainer_evaluate, &
            spw_trainer_throughput, &
            spw_trainer_peak_memory, spw_trainer_save_checkpoint, &
            spw_trainer_load_checkpoint, spw_trainer_free
  public :: spw_request_stop, spw_catch_stop_signals, spw_trainer_stop_signal

  interface
    function c_status_string(status) bind(c, name='spw_status_string')
      import :: c_int, c_ptr
      integer(c_int), value :: status
      type(c_ptr) :: c_status_string
    end function
    function c_last_error() bind(c, name='spw_last_error')
      import :: c_ptr
      type(c_ptr) :: c_last_error
    end function
    function c_strlen(text) bind(c, name='strlen')
      import :: c_ptr, c_size_t
      type(c_ptr), value :: text
      integer(c_size_t) :: c_strlen
    end function
    function c_get_version(major, minor, patch) bind(c, name='spw_get_version')
      import :: c_int
      integer(c_int) :: major, minor, patch
      integer(c_int) :: c_get_version
    end function
    function c_session_create_f(comm, session) bind(c, name='spw_session_create_f')
      import :: c_int, c_ptr
      integer(c_int), value :: comm
      type(c_ptr) :: session
      integer(c_int) :: c_session_create_f
    end function
    function c_session_rank(session, rank) bind(c, name='spw_session_rank')
      import :: c_int, c_ptr
      type(c_ptr), value :: session
      integer(c_int) :: rank
      integer(c_int) :: c_session_rank
    end function
    function c_session_size(session, size) bind(c, name='spw_session_size')
      import :: c_int, c_ptr
      type(c_ptr), value :: session
      integer(c_int) :: size
      integer(c_int) :: c_session_size
    end function
    function c_session_free(session) bind(c, name='spw_session_free')
      import :: c_int, c_ptr
      type(c_ptr), value :: session
      integer(c_int) :: c_session_free
    end function
    function c_job_create(job) bind(c, name='spw_job_create')
      import :: c_int, c_ptr
      type(c_ptr) :: job
      integer(c_int) :: c_job_create
    end function
    function c_job_create_from_file(path, job) bind(c, name='spw_job_create_from_file')
      import :: c_int, c_ptr, c_char
      character(kind=c_char) :: path(*)
      type(c_ptr) :: job
      integer(c_int) :: c_job_create_from_file
    end function
    function c_job_create_from_string(toml, job) bind(c, name='spw_job_create_from_string')
      import :: c_int, c_ptr, c_char
      character(kind=c_char) :: toml(*)
      type(c_ptr) :: job
      integer(c_int) :: c_job_create_from_string
    end function
    function c_job_set(job, key, value) bind(c, name='spw_job_set')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: job
      character(kind=c_char) :: key(*), value(*)
      integer(c_int) :: c_job_set
    end function
    function c_job_set_input(job, width) bind(c, name='spw_job_set_input')
      import :: c_int, c_ptr
      type(c_ptr), value :: job
      integer(c_int), value :: width
      integer(c_int) :: c_job_set_input
    end function
    function c_job_add_dense(job, width) bind(c, name='spw_job_add_dense')
      import :: c_int, c_ptr
      type(c_ptr), value :: job
      integer(c_int), value :: width
      integer(c_int) :: c_job_add_dense
    end function
    function c_job_add_transformer_blocks(job, count) &
        bind(c, name='spw_job_add_transformer_blocks')
      import :: c_int, c_ptr
      type(c_ptr), value :: job
      integer(c_int), value :: count
      integer(c_int) :: c_job_add_transformer_blocks
    end function
    function c_job_check(job) bind(c, name='spw_job_check')
      import :: c_int, c_ptr
      type(c_ptr), value :: job
      integer(c_int) :: c_job_check
    end function
    function c_job_free(job) bind(c, name='spw_job_free')
      import :: c_int, c_ptr
      type(c_ptr), value :: job
      integer(c_int) :: c_job_free
    end function
    function c_trainer_create(session, job, trainer) bind(c, name='spw_trainer_create')
      import :: c_int, c_ptr
      type(c_ptr), value :: session, job
      type(c_ptr) :: trainer
      integer(c_int) :: c_trainer_create
    end function
    function c_trainer_describe_plan(trainer, buffer, size, needed) &
        bind(c, name='spw_trainer_describe_plan')
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: trainer, buffer
      integer(c_size_t), value :: size
      integer(c_size_t) :: needed
      integer(c_int) :: c_trainer_describe_plan
    end function
    function c_trainer_train(trainer, steps) bind(c, name='spw_trainer_train')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: trainer
      integer(c_int64_t), value :: steps
      integer(c_int) :: c_trainer_train
    end function
    function c_trainer_steps_done(trainer, steps) bind(c, name='spw_trainer_steps_done')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: trainer
      integer(c_int64_t) :: steps
      integer(c_int) :: c_trainer_steps_done
    end function
    function c_trainer_loss(trainer, loss) bind(c, name='spw_trainer_loss')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: trainer
      real(c_double) :: loss
      integer(c_int) :: c_trainer_loss
    end function
    function c_trainer_evaluate(trainer, batches, loss) bind(c, name='spw_trainer_evaluate')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: trainer
      integer(c_int), value :: batches
      real(c_double) :: loss
      integer(c_int) :: c_trainer_evaluate
    end function
    function c_trainer_throughput(trainer, per_second) bind(c, name='spw_trainer_throughput')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: trainer
      real(c_double) :: per_second
      integer(c_int) :: c_trainer_throughput
    end function
    function c_trainer_peak_memory(trainer, bytes) bind(c, name='spw_trainer_peak_memory')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: trainer
      integer(c_int64_t) :: bytes  ! uint64_t in C; no rank holds 2**63 bytes
      integer(c_int) :: c_trainer_peak_memory
    end function
    function c_trainer_save_checkpoint(trainer, path) &
        bind(c, name='spw_trainer_save_checkpoint')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: trainer
      character(kind=c_char) :: path(*)
      integer(c_int) :: c_trainer_save_checkpoint
    end function
    function c_trainer_load_checkpoint(trainer, path) &
        bind(c, name='spw_trainer_load_checkpoint')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: trainer
      character(kind=c_char) :: path(*)
      integer(c_int) :: c_trainer_load_checkpoint
    end function
    function c_trainer_free(trainer) bind(c, name='spw_trainer_free')
      import :: c_int, c_ptr
      type(c_ptr), value :: trainer
      integer(c_int) :: c_trainer_free
    end function
    subroutine c_request_stop(signal_number) bind(c, name='spw_request_stop')
      import :: c_int
      integer(c_int), value :: signal_number
    end subroutine
    function c_catch_stop_signals() bind(c, name='spw_catch_stop_signals')
      import :: c_int
      integer(c_int) :: c_catch_stop_signals
    end function
    function c_trainer_stop_signal(trainer, signal_number) &
        bind(c, name='spw_trainer_stop_signal')
      import :: c_int, c_ptr
      type(c_ptr), value :: trainer
      integer(c_int) :: signal_number
      integer(c_int) :: c_trainer_stop_signal
    end function
  end interface

contains

  ! A C string the library owns, copied into a Fortran string.
  function from_c(text) result(out)
    type(c_ptr), intent(in) :: text
    character(:), allocatable :: out
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(text)) then
      out = ''
      return
    end if
    n = int(c_strlen(text))
    call c_f_pointer(text, chars, [n])
    allocate(character(n) :: out)
    do i = 1, n
      out(i:i) = chars(i)
    end do
  end function from_c

  function to_c(text) result(out)
    character(*), intent(in) :: text
    character(kind=c_char, len=:), allocatable :: out
    out = trim(text) // c_null_char
  end function to_c

  ! Hands the status to ierror, or reports a failure on error_unit when there is no ierror.
  subroutine finish(status, ierror)
    integer(c_int), intent(in) :: status
    integer, intent(out), optional :: ierror
    if (present(ierror)) then
      ierror = int(status)
    else if (status /= SPW_OK) then
      write (error_unit, '(a)') 'spillway: ' // spw_last_error()
    end if
  end subroutine finish

  function spw_status_string(status) result(text)
    integer, intent(in) :: status
    character(:), allocatable :: text
    text = from_c(c_status_string(int(status, c_int)))
  end function spw_status_string

  function spw_last_error() result(text)
    character(:), allocatable :: text
    text = from_c(c_last_error())
  end function spw_last_error

  subroutine spw_get_version(major, minor, patch, ierror)
    integer, intent(out) :: major, minor, patch
    integer, intent(out), optional :: ierror
    integer(c_int) :: parts(3)
    integer(c_int) :: status
    parts = 0
    status = c_get_version(parts(1), parts(2), parts(3))
    major = parts(1)
    minor = parts(2)
    patch = parts(3)
    call finish(status, ierror)
  end subroutine spw_get_version

  subroutine spw_session_create(comm, session, ierror)
    integer, intent(in) :: comm  ! MPI_Fint: MPI_COMM_WORLD from `use mpi`, %MPI_VAL from mpi_f08
    type(spw_session), intent(inout) :: session
    integer, intent(out), optional :: ierror
    call finish(c_session_create_f(int(comm, c_int), session%ptr), ierror)
  end subroutine spw_session_create

  subroutine spw_session_rank(session, rank, ierror)
    type(spw_session), intent(in) :: session
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierror
    integer(c_int) :: value
    value = -1
    call finish(c_session_rank(session%ptr, value), ierror)
    rank = int(value)
  end subroutine spw_session_rank

  subroutine spw_session_size(session, size, ierror)
    type(spw_session), intent(in) :: session
    integer, intent(out) :: size
    integer, intent(out), optional :: ierror
    integer(c_int) :: value
    value = 0
    call finish(c_session_size(session%ptr, value), ierror)
    size = int(value)
  end subroutine spw_session_size

  subroutine spw_session_free(session, ierror)
    type(spw_session), intent(inout) :: session
    integer, intent(out), optional :: ierror
    integer(c_int) :: status
    status = c_session_free(session%ptr)
    if (status == SPW_OK) session%ptr = c_null_ptr
    call finish(status, ierror)
  end subroutine spw_session_free

  subroutine spw_job_create(job, ierror)
    type(spw_job), intent(inout) :: job
    integer, intent(out), optional :: ierror
    call finish(c_job_create(job%ptr), ierror)
  end subroutine spw_job_create

  subroutine spw_job_create_from_file(path, job, ierror)
    character(*), intent(in) :: path
    type(spw_job), intent(inout) :: job
    integer, intent(out), optional :: ierror
    call finish(c_job_create_from_file(to_c(path), job%ptr), ierror)
  end subroutine spw_job_create_from_file

  subroutine spw_job_create_from_string(toml, job, ierror)
    character(*), intent(in) :: toml
    type(spw_job), intent(inout) :: job
    integer, intent(out), optional :: ierror
    call finish(c_job_create_from_string(to_c(toml), job%ptr), ierror)
  end subroutine spw_job_create_from_string

  subroutine spw_job_set(job, key, value, ierror)
    type(spw_job), intent(in) :: job
    character(*), intent(in) :: key, value
    integer, intent(out), optional :: ierror
    call finish(c_job_set(job%ptr, to_c(key), to_c(value)), ierror)
  end subroutine spw_job_set

  subroutine spw_job_set_input(job, width, ierror)
    type(spw_job), intent(in) :: job
    integer, intent(in) :: width
    integer, intent(out), optional :: ierror
    call finish(c_job_set_input(job%ptr, int(width, c_int)), ierror)
  end subroutine spw_job_set_input

  subroutine spw_job_add_dense(job, width, ierror)
    type(spw_job), intent(in) :: job
    integer, intent(in) :: width
    integer, intent(out), optional :: ierror
    call finish(c_job_add_dense(job%ptr, int(width, c_int)), ierror)
  end subroutine spw_job_add_dense

  subroutine spw_job_add_transformer_blocks(job, count, ierror)
    type(spw_job), intent(in) :: job
    integer, intent(in) :: count
    integer, intent(out), optional :: ierror
    call finish(c_job_add_transformer_blocks(job%ptr, int(count, c_int)), ierror)
  end subroutine spw_job_add_transformer_blocks

  subroutine spw_job_check(job, ierror)
    type(spw_job), intent(in) :: job
    integer, intent(out), optional :: ierror
    call finish(c_job_check(job%ptr), ierror)
  end subroutine spw_job_check

  subroutine spw_job_free(job, ierror)
    type(spw_job), intent(inout) :: job
    integer, intent(out), optional :: ierror
    integer(c_int) :: status
    status = c_job_free(job%ptr)
    if (status == SPW_OK) job%ptr = c_null_ptr
    call finish(status, ierror)
  end subroutine spw_job_free

  subroutine spw_trainer_create(session, job, trainer, ierror)
    type(spw_session), intent(in) :: session
    type(spw_job), intent(in) :: job
    type(spw_trainer), intent(inout) :: trainer
    integer, intent(out), optional :: ierror
    call finish(c_trainer_create(session%ptr, job%ptr, trainer%ptr), ierror)
  end subroutine spw_trainer_create

  ! The plan's text, sized by the library (the C call's size handshake is done here).
  subroutine spw_trainer_describe_plan(trainer, text, ierror)
    type(spw_trainer), intent(in) :: trainer
    character(:), allocatable, intent(out) :: text
    integer, intent(out), optional :: ierror
    character(kind=c_char), allocatable, target :: buffer(:)
    integer(c_size_t) :: needed
    integer(c_int) :: status
    integer :: i
    text = ''
    needed = 0
    status = c_trainer_describe_plan(trainer%ptr, c_null_ptr, 0_c_size_t, needed)
    if (status == SPW_OK) then
      allocate(buffer(needed))
      status = c_trainer_describe_plan(trainer%ptr, c_loc(buffer), needed, needed)
      if (status == SPW_OK) then
        text = repeat(' ', int(needed) - 1)
        do i = 1, int(needed) - 1
          text(i:i) = buffer(i)
        end do
      end if
    end if
    call finish(status, ierror)
  end subroutine spw_trainer_describe_plan

  subroutine spw_trainer_train(trainer, steps, ierror)
    type(spw_trainer), intent(in) :: trainer
    integer, intent(in) :: steps
    integer, intent(out), optional :: ierror
    call finish(c_trainer_train(trainer%ptr, int(steps, c_int64_t)), ierror)
  end subroutine spw_trainer_train

  subroutine spw_trainer_steps_done(trainer, steps, ierror)
    type(spw_trainer), intent(in) :: trainer
    integer(c_int64_t), intent(out) :: steps
    integer, intent(out), optional :: ierror
    steps = 0
    call finish(c_trainer_steps_done(trainer%ptr, steps), ierror)
  end subroutine spw_trainer_steps_done

  subroutine spw_trainer_loss(trainer, loss, ierror)
    type(spw_trainer), intent(in) :: trainer
    real(c_double), intent(out) :: loss
    integer, intent(out), optional :: ierror
    loss = 0
    call finish(c_trainer_loss(trainer%ptr, loss), ierror)
  end subroutine spw_trainer_loss

  ! Collective: the mean loss of `batches` held-out batches (spw_trainer_evaluate).
  subroutine spw_trainer_evaluate(trainer, batches, loss, ierror)
    type(spw_trainer), intent(in) :: trainer
    integer, intent(in) :: batches
    real(c_double), intent(out) :: loss
    integer, intent(out), optional :: ierror
    loss = 0
    call finish(c_trainer_evaluate(trainer%ptr, int(batches, c_int), loss), ierror)
  end subroutine spw_trainer_evaluate

  subroutine spw_trainer_throughput(trainer, per_second, ierror)
    type(spw_trainer), intent(in) :: trainer
    real(c_double), intent(out) :: per_second
    integer, intent(out), optional :: ierror
    per_second = 0
    call finish(c_trainer_throughput(trainer%ptr, per_second), ierror)
  end subroutine spw_trainer_throughput

  subroutine spw_trainer_peak_memory(trainer, bytes, ierror)
    type(spw_trainer), intent(in) :: trainer
    integer(c_int64_t), intent(out) :: bytes
    integer, intent(out), optional :: ierror
    bytes = 0
    call finish(c_trainer_peak_memory(trainer%ptr, bytes), ierror)
  end subroutine spw_trainer_peak_memory

  subroutine spw_trainer_save_checkpoint(trainer, path, ierror)
    type(spw_trainer), intent(in) :: trainer
    character(*), intent(in) :: path
    integer, intent(out), optional :: ierror
    call finish(c_trainer_save_checkpoint(trainer%ptr, to_c(path)), ierror)
  end subroutine spw_trainer_save_checkpoint

  subroutine spw_trainer_load_checkpoint(trainer, path, ierror)
    type(spw_trainer), intent(in) :: trainer
    character(*), intent(in) :: path
    integer, intent(out), optional :: ierror
    call finish(c_trainer_load_checkpoint(trainer%ptr, to_c(path)), ierror)
  end subroutine spw_trainer_load_checkpoint

  subroutine spw_trainer_free(trainer, ierror)
    type(spw_trainer), intent(inout) :: trainer
    integer, intent(out), optional :: ierror
    integer(c_int) :: status
    status = c_trainer_free(trainer%ptr)
    if (status == SPW_OK) trainer%ptr = c_null_ptr
    call finish(status, ierror)
  end subroutine spw_trainer_free

  ! Asks spw_trainer_train to stop after the step in progress (spillway.h); async-signal-safe.
  subroutine spw_request_stop(signal_number)
    integer, intent(in) :: signal_number
    call c_request_stop(int(signal_number, c_int))
  end subroutine spw_request_stop

  ! SIGUSR1 and SIGTERM become stop requests, once each.
  subroutine spw_catch_stop_signals(ierror)
    integer, intent(out), optional :: ierror
    call finish(c_catch_stop_signals(), ierror)
  end subroutine spw_catch_stop_signals

  ! The signal that ended the latest spw_trainer_train early, 0 when it ran every step.
  subroutine spw_trainer_stop_signal(trainer, signal_number, ierror)
    type(spw_trainer), intent(in) :: trainer
    integer, intent(out) :: signal_number
    integer, intent(out), optional :: ierror
    integer(c_int) :: number
    number = 0
    call finish(c_trainer_stop_signal(trainer%ptr, number), ierror)
    signal_number = int(number)
  end subroutine spw_trainer_stop_signal

end module spillway
