//! What one event is called and what it shows, per family, for the viewers that draw
//! single events: the Perfetto export writes a [`Description`] as a slice's (or an
//! instant's) name and args, the Firefox export as a marker's name and fields, with the
//! marker's schema made of the same fields ([`Field::marker`]) and its type from
//! [`marker_type`]. A family's title and fields are written once, in [`describe`].
use super::names::{
    bio_op_name, device_name, function_name, lock_source_name, memgrowth_name, syscall_name,
    task_state_name,
};
use super::places::{interrupt_wake, kernel_place, leaf, user_place};
use crate::event::{EventView, Fields, Waker};
use crate::model::{Frame, Loaded};
use crate::reports::EventKind;
use ebtrace_format::proto::LockSource;

/// An event's title and fields.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Description {
    /// The slice's or marker's name: "lock wait in Queue::pop", "syscall fsync".
    pub title: String,
    pub fields: Vec<Field>,
    /// offcpu: the thread that woke the block, when a thread did (not an interrupt): the
    /// start of Perfetto's wake-up flow.
    pub waker_thread: Option<u32>,
}

/// One field of a [`Description`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    /// The Perfetto arg's name and the Firefox marker field's key.
    pub key: &'static str,
    /// The Firefox marker table's column ("" when not a marker field).
    pub label: &'static str,
    pub value: Value,
    /// Whether Perfetto writes it (an arg left out when it says nothing: no hold, no
    /// error, no waker).
    pub arg: bool,
    /// Whether it is a Firefox marker field: the same fields, in the same order, for
    /// every event of a kind (a marker's schema is its kind's).
    pub marker: bool,
}

/// A field's value: its JSON in Perfetto, its format and value in Firefox.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Text(String),
    Integer(i64),
    Ns(u64),
    Bytes(u64),
    /// A stack id: Perfetto's list of frame lines, Firefox's one string.
    Stack(u64),
    /// Perfetto's true or false, Firefox's "yes" or "no".
    YesNo(bool),
}

impl Field {
    fn both(key: &'static str, label: &'static str, value: Value) -> Self {
        Field {
            key,
            label,
            value,
            arg: true,
            marker: true,
        }
    }

    /// A marker field that Perfetto writes only when `arg`.
    fn marker_and_arg_if(key: &'static str, label: &'static str, value: Value, arg: bool) -> Self {
        Field {
            arg,
            ..Field::both(key, label, value)
        }
    }

    /// A Firefox marker field only (Perfetto has it as the title, or under another key).
    fn marker(key: &'static str, label: &'static str, value: Value) -> Self {
        Field {
            arg: false,
            ..Field::both(key, label, value)
        }
    }

    /// A Perfetto arg only.
    fn arg(key: &'static str, value: Value) -> Self {
        Field {
            marker: false,
            ..Field::both(key, "", value)
        }
    }
}

/// The Firefox marker type of the interval kinds: (type name, category, description).
pub(crate) fn marker_type(kind: EventKind) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match kind {
        EventKind::OffCpu => (
            "EbtraceOffCpu",
            "Off-CPU",
            "A block off the CPU (ebrec --offcpu): where it blocked, the kernel function, \
             the task state and the thread that woke it",
        ),
        EventKind::Lock => (
            "EbtraceLock",
            "Lock",
            "A contended lock wait (ebrec --lock): the mutex, how long it was held after, \
             and the thread that released it",
        ),
        EventKind::Func => (
            "EbtraceFunc",
            "Function",
            "A call of a function probed with ebrec --func",
        ),
        EventKind::Syscall => (
            "EbtraceSyscall",
            "Syscall",
            "A slow system call (ebrec --syscalls)",
        ),
        EventKind::Bio => (
            "EbtraceBio",
            "Block I/O",
            "A block I/O request (ebrec --bio)",
        ),
        EventKind::Runq => (
            "EbtraceRunq",
            "Run queue",
            "A wait in the run queue (ebrec --runq)",
        ),
        _ => return None,
    })
}

/// The title and fields of event `v` of the trace `l` was read into; `frames` are its
/// stack's, `waker_frames` its waker's (empty when none).
pub(crate) fn describe(
    v: &EventView,
    frames: &[Frame],
    waker_frames: &[Frame],
    l: &Loaded,
) -> Description {
    use Value::*;
    let place = || user_place(frames);
    let waker = v.waker.unwrap_or(Waker { tid: 0, stack: 0 });
    let mut waker_thread = None;
    let (title, fields) = match v.fields {
        Fields::OffCpu {
            state, runnable_ns, ..
        } => {
            let (title, mut fields, woken_by) = offcpu(frames, waker_frames, waker, state);
            waker_thread = woken_by;
            // The end of the block after its wake, waiting for a CPU: a marker field of
            // every block (the kind's schema), a Perfetto arg when measured.
            fields.push(Field::marker_and_arg_if(
                "runnable_ns",
                "Runnable after the wake",
                Ns(runnable_ns),
                runnable_ns > 0,
            ));
            (title, fields)
        }
        Fields::Lock { .. } => lock(&v.fields, frames, waker),
        Fields::Func { function } => {
            let (name, place) = (function_name(l, function), place());
            let fields = vec![
                Field::marker("function", "Function", Text(name.clone())),
                Field::marker("place", "Caller", Text(place.clone())),
                Field::arg("caller", Text(place)),
            ];
            (name, fields)
        }
        Fields::Usdt { probe } => {
            let (name, place) = (super::names::usdt_name(l, probe), place());
            let fields = vec![
                Field::marker("probe", "Probe", Text(name.clone())),
                Field::marker("place", "In", Text(place.clone())),
                Field::arg("in", Text(place)),
            ];
            (format!("usdt {name}"), fields)
        }
        Fields::Syscall { nr, ret, .. } => {
            let (name, place) = (syscall_name(&l.header.arch, u64::from(nr)), place());
            let fields = vec![
                Field::both("syscall", "Syscall", Text(name.clone())),
                Field::both("ret", "Returned", Integer(ret)),
                Field::marker("place", "In", Text(place.clone())),
                Field::arg("caller", Text(place)),
            ];
            (format!("syscall {name}"), fields)
        }
        Fields::Bio {
            dev,
            bytes,
            op,
            error,
            ..
        } => {
            let (device, op) = (device_name(l, dev), bio_op_name(op));
            let fields = vec![
                Field::both("device", "Device", Text(device.clone())),
                Field::both("op", "Op", Text(op.into())),
                Field::both("bytes", "Bytes", Bytes(bytes)),
                Field::marker_and_arg_if("error", "Error", Integer(error.into()), error != 0),
            ];
            (format!("bio {op} {device}"), fields)
        }
        Fields::Runq { preempted, cpu, .. } => (
            "runq wait".to_string(),
            vec![
                Field::both("preempted", "Preempted", YesNo(preempted != 0)),
                Field::both("cpu", "CPU", Integer(cpu.into())),
            ],
        ),
        Fields::Alloc { size, .. } => (
            "alloc".to_string(),
            vec![
                Field::arg("size", Bytes(size)),
                // The allocation site: past the allocator wrappers, by their names.
                Field::arg(
                    "in",
                    Text(super::wrappers::site_place(
                        &super::wrappers::WrapperRules::default(),
                        frames,
                    )),
                ),
            ],
        ),
        Fields::Cpu { cpu } => (leaf(frames), vec![Field::arg("cpu", Integer(cpu.into()))]),
        Fields::MemGrowth { kind, size, .. } => (
            memgrowth_name(kind).to_string(),
            vec![
                Field::arg("size", Bytes(size)),
                Field::arg("in", Text(place())),
            ],
        ),
        // The exports leave TCP events to `ebsym tcp`.
        Fields::Tcp { .. } => ("tcp".to_string(), Vec::new()),
    };
    Description {
        title,
        fields,
        waker_thread,
    }
}

/// An off-CPU block's title (where it was) and fields, and the thread that woke it (none
/// when an interrupt did).
fn offcpu(
    frames: &[Frame],
    waker_frames: &[Frame],
    waker: Waker,
    state: u32,
) -> (String, Vec<Field>, Option<u32>) {
    use Value::*;
    let place = user_place(frames);
    let blocked_in = kernel_place(frames);
    let mut waker_thread = None;
    let mut fields = vec![
        Field::marker("place", "In", Text(place.clone())),
        Field::marker_and_arg_if(
            "blocked_in",
            "Blocked in",
            Text(blocked_in.clone().unwrap_or_default()),
            blocked_in.is_some(),
        ),
        Field::both("state", "State", Text(task_state_name(state))),
    ];
    // An interrupt's wake names whichever thread it ran on: no waker. The recorder
    // keeps no waker for a wake from the idle task (an interrupt on an idle CPU).
    let interrupt = interrupt_wake(waker_frames);
    if !interrupt && waker.tid != 0 {
        waker_thread = Some(waker.tid);
    }
    let by = if waker_thread.is_some() {
        "thread"
    } else {
        "interrupt"
    };
    fields.push(Field::both("woken_by", "Woken by", Text(by.into())));
    if interrupt {
        fields.push(Field::arg("interrupted_tid", Integer(waker.tid.into())));
    }
    fields.push(Field::marker_and_arg_if(
        "waker_tid",
        "Waker tid",
        Integer(waker_thread.unwrap_or(0).into()),
        waker_thread.is_some(),
    ));
    fields.push(Field::marker_and_arg_if(
        "waker_stack",
        "Waker stack",
        Stack(waker.stack),
        waker.stack != 0,
    ));
    (place, fields, waker_thread)
}

/// A lock wait's title and fields (of `fields`, a lock event's).
fn lock(fields: &Fields, frames: &[Frame], waker: Waker) -> (String, Vec<Field>) {
    use Value::*;
    let Fields::Lock {
        mutex,
        hold_ns,
        futex_op,
        source,
        result,
    } = *fields
    else {
        unreachable!("lock() describes lock events")
    };
    let place = user_place(frames);
    let mut fields = vec![
        Field::marker("place", "In", Text(place.clone())),
        Field::both("mutex", "Mutex", Text(format!("{mutex:#x}"))),
        Field::both("source", "Source", Text(lock_source_name(source).into())),
    ];
    if source == LockSource::Futex {
        fields.push(Field::arg("futex_op", Integer(futex_op.into())));
    }
    fields.push(Field::marker_and_arg_if(
        "hold_ns",
        "Held",
        Ns(hold_ns),
        hold_ns != 0,
    ));
    if result != 0 {
        fields.push(Field::arg("result", Integer(result.into())));
    }
    fields.extend([
        Field::marker_and_arg_if(
            "waker_tid",
            "Released by tid",
            Integer(waker.tid.into()),
            waker.tid != 0,
        ),
        Field::marker_and_arg_if(
            "waker_stack",
            "Releaser stack",
            Stack(waker.stack),
            waker.stack != 0,
        ),
    ]);
    (format!("lock wait in {place}"), fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use ebtrace_format::events::SyscallEvent;
    use ebtrace_format::events::{BioEvent, FuncEvent, LockEvent, OffCpuEvent, RunqEvent};

    fn frame(function: &str, module: &str) -> Frame {
        Frame {
            function: function.into(),
            file: None,
            line: None,
            inlined: false,
            module: module.into(),
            address: "0x1".into(),
        }
    }

    fn keys(d: &Description, marker: bool) -> Vec<&'static str> {
        d.fields
            .iter()
            .filter(|f| if marker { f.marker } else { f.arg })
            .map(|f| f.key)
            .collect()
    }

    /// A marker's fields are its kind's schema: the same keys for every event of the
    /// kind, whatever Perfetto leaves out of its args.
    #[test]
    fn every_event_of_a_kind_has_the_kinds_marker_fields() {
        let l = Loaded::default();
        let stack = [
            frame("futex_wait", "[kernel]"),
            frame("Queue::pop()", "/app"),
        ];
        let thread = [
            frame("futex_wake", "[kernel]"),
            frame("Queue::push()", "/app"),
        ];
        let irq = [frame("asm_sysvec_apic_timer_interrupt", "[kernel]")];
        let offcpu = |tid, wstack| OffCpuEvent {
            waker_tid: tid,
            waker_stack: wstack,
            duration_ns: 10,
            ..Default::default()
        };
        // A block whose wait for a CPU after the wake was measured.
        let runnable = OffCpuEvent {
            runnable_ns: 4,
            ..offcpu(7, 3)
        };
        let lock = |hold, wtid, result| LockEvent {
            hold_ns: hold,
            waker_tid: wtid,
            result,
            source: LockSource::Futex,
            ..Default::default()
        };
        // An event, and (its frames, its waker's frames) to describe it with.
        type Stacks<'a> = Vec<(&'a [Frame], &'a [Frame])>;
        let cases: Vec<(EventView, Stacks)> = vec![
            (
                Event::OffCpu(&offcpu(7, 3)).view().unwrap(),
                vec![(&stack, &thread), (&stack, &irq), (&[], &[])],
            ),
            (
                Event::OffCpu(&offcpu(0, 0)).view().unwrap(),
                vec![(&stack, &[])],
            ),
            (
                Event::OffCpu(&runnable).view().unwrap(),
                vec![(&stack, &thread), (&[], &[])],
            ),
            (
                Event::Lock(&lock(5, 7, -4)).view().unwrap(),
                vec![(&stack, &[])],
            ),
            (
                Event::Lock(&lock(0, 0, 0)).view().unwrap(),
                vec![(&[], &[])],
            ),
            (
                Event::Func(&FuncEvent::default()).view().unwrap(),
                vec![(&stack, &[])],
            ),
            (
                Event::Syscall(&SyscallEvent::default()).view().unwrap(),
                vec![(&stack, &[])],
            ),
            (
                Event::Bio(&BioEvent {
                    error: -5,
                    ..Default::default()
                })
                .view()
                .unwrap(),
                vec![(&[], &[])],
            ),
            (
                Event::Bio(&BioEvent::default()).view().unwrap(),
                vec![(&[], &[])],
            ),
            (
                Event::Runq(&RunqEvent::default()).view().unwrap(),
                vec![(&[], &[])],
            ),
        ];
        let mut schema: std::collections::HashMap<EventKind, Vec<&str>> = Default::default();
        for (v, frames) in &cases {
            assert!(marker_type(v.kind).is_some(), "{:?}", v.kind);
            for (f, w) in frames {
                let d = describe(v, f, w, &l);
                let k = keys(&d, true);
                let want = schema.entry(v.kind).or_insert_with(|| k.clone());
                assert_eq!(&k, want, "{:?}", v.kind);
            }
        }
        // What Perfetto leaves out, and the wake-up it draws a flow from.
        let v = Event::OffCpu(&offcpu(7, 3)).view().unwrap();
        let d = describe(&v, &stack, &thread, &l);
        assert_eq!(d.title, "Queue::pop");
        assert_eq!(d.waker_thread, Some(7));
        assert_eq!(
            keys(&d, false),
            [
                "blocked_in",
                "state",
                "woken_by",
                "waker_tid",
                "waker_stack"
            ]
        );
        let d = describe(&v, &stack, &irq, &l);
        assert_eq!(d.waker_thread, None);
        assert_eq!(
            keys(&d, false),
            [
                "blocked_in",
                "state",
                "woken_by",
                "interrupted_tid",
                "waker_stack"
            ]
        );
        let v = Event::Lock(&lock(0, 0, 0)).view().unwrap();
        let d = describe(&v, &stack, &[], &l);
        assert_eq!(d.title, "lock wait in Queue::pop");
        assert_eq!(keys(&d, false), ["mutex", "source", "futex_op"]);
    }
}
