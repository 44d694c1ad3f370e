//! A full-screen terminal dashboard for a training run: the [`Dashboard`] [`Reporter`].
//!
//! It shows, redrawn at most ten times a second:
//!
//! - a header with the device, the parameter count, epoch x/N, step x/total, the recent
//!   steps per second, the ETA (steps left over the recent steps per second) and the elapsed
//!   time;
//! - a gauge of the current epoch's batches;
//! - a chart of the training loss of every step line and the validation loss of every
//!   evaluation, against the step;
//! - a chart of the other metrics (training `acc` from the step lines, `<valid>_acc` from the
//!   evaluations...), or of the learning rate when the run has no metric besides the loss;
//! - a panel with the learning rate, samples per second, step time and device memory of the
//!   latest (or the selected) step line;
//! - a table of the epoch lines;
//! - when the run ends, its summary.
//!
//! Keys: `←`/`→` move a cursor through the step lines (the panel shows the selected one, the
//! charts mark it), `Home` goes to the first, `End` back to following the run live; `↑`/`↓`
//! scroll the epoch table; `q` or `Ctrl-C` asks the run to stop after the current optimizer step
//! (it writes a checkpoint; pressing either again closes the dashboard at once). After the
//! run ends, any key closes it.
//!
//! Drawing happens on a thread of its own: [`Reporter::report`] only sends an owned copy of the
//! event over a channel, so training never waits for the terminal. The terminal is put back
//! (main screen, cooked mode, cursor shown) when the dashboard closes, is dropped, or its thread
//! panics.

use super::report::{
    EpochLine, EvalLine, Event, Metrics, Outcome, Reporter, RunInfo, StepLine, Summary,
};
use crate::core::{Error, Result};
use ratatui::crossterm::event::{self as term, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Chart, Clear, Dataset, Gauge, GraphType, LegendPosition, Paragraph, Row, Table,
    Wrap,
};
use ratatui::{Frame, Terminal, backend::CrosstermBackend};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{IsTerminal, Stdout};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Shortest time between two redraws.
const FRAME: Duration = Duration::from_millis(100);
/// Longest wait for a key before looking at the channel again.
const POLL: Duration = Duration::from_millis(50);
/// How far back the recent steps per second look.
const RATE_WINDOW_SECS: f64 = 30.0;

/// A full-screen terminal dashboard of a training run (see the [module docs](self)).
///
/// It owns the thread that draws; dropping it (or [`Dashboard::wait`]) joins that thread, which
/// after [`Event::Finish`] shows the summary until a key is pressed.
pub struct Dashboard {
    tx: Option<Sender<(OwnedEvent, f64)>>,
    ui: Option<JoinHandle<Result<()>>>,
    t0: Instant,
}

impl Dashboard {
    /// Takes over the terminal (alternate screen, raw mode) and starts the drawing thread.
    /// `stop` is the run's stop flag ([`Learner::stop_flag`](super::Learner::stop_flag)), raised
    /// by `q` or `Ctrl-C`.
    ///
    /// An error when stdout is not a terminal (fall back to [`Console`](super::report::Console))
    /// or when the terminal cannot be set up.
    pub fn new(stop: Arc<AtomicBool>) -> Result<Dashboard> {
        if !std::io::stdout().is_terminal() {
            return Err(Error::io(
                "dashboard",
                "the dashboard needs a terminal, but stdout is not one (use the console reporter)",
            ));
        }
        let guard = TerminalGuard::enter()?;
        let mut term = Terminal::new(CrosstermBackend::new(std::io::stdout()))
            .map_err(|e| Error::io("dashboard", format!("cannot set up the terminal: {e}")))?;
        term.clear()
            .map_err(|e| Error::io("dashboard", format!("cannot clear the terminal: {e}")))?;
        let (tx, rx) = mpsc::channel();
        let t0 = Instant::now();
        // On a failed spawn the closure, and so the guard, is dropped: the terminal is restored.
        let ui = std::thread::Builder::new()
            .name("kiln-dashboard".into())
            .spawn(move || run_ui(guard, term, rx, stop, t0))
            .map_err(|e| Error::io("dashboard", format!("cannot start the drawing thread: {e}")))?;
        Ok(Dashboard {
            tx: Some(tx),
            ui: Some(ui),
            t0,
        })
    }

    /// Waits for the dashboard to close — after [`Event::Finish`], until a key is pressed;
    /// without it, at once — and restores the terminal. An error when the drawing thread failed
    /// or panicked.
    pub fn wait(mut self) -> Result<()> {
        self.close()
    }

    /// Ends the channel and joins the drawing thread.
    fn close(&mut self) -> Result<()> {
        self.tx = None;
        self.join()
    }

    fn join(&mut self) -> Result<()> {
        let Some(ui) = self.ui.take() else {
            return Ok(());
        };
        match ui.join() {
            Ok(r) => r,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                Err(Error::io(
                    "dashboard",
                    format!("the drawing thread panicked: {what}"),
                ))
            }
        }
    }
}

impl Reporter for Dashboard {
    fn report(&mut self, event: &Event<'_>) -> Result<()> {
        let Some(tx) = &self.tx else {
            return Ok(());
        };
        let at = self.t0.elapsed().as_secs_f64();
        if tx.send((OwnedEvent::from(event), at)).is_err() {
            // The drawing thread ended: closed by a key (fine, training goes on without it) or
            // failed (an error, which stops the run).
            self.tx = None;
            return self.join();
        }
        Ok(())
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            eprintln!("{e}");
        }
    }
}

/// Raw mode and the alternate screen while it lives; the terminal as it was when dropped
/// (also when the drawing thread unwinds from a panic).
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> Result<TerminalGuard> {
        terminal::enable_raw_mode().map_err(|e| {
            Error::io(
                "dashboard",
                format!("cannot put the terminal in raw mode: {e}"),
            )
        })?;
        let guard = TerminalGuard;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )
        .map_err(|e| {
            Error::io(
                "dashboard",
                format!("cannot switch to the alternate screen: {e}"),
            )
        })?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = execute!(
            std::io::stdout(),
            terminal::LeaveAlternateScreen,
            cursor::Show
        );
        let _ = terminal::disable_raw_mode();
    }
}

/// The drawing thread: applies events, redraws, handles keys; ends when a key closes it, or
/// when the channel ends (after the summary was dismissed, if the run finished).
fn run_ui(
    _guard: TerminalGuard,
    mut term: Terminal<CrosstermBackend<Stdout>>,
    rx: Receiver<(OwnedEvent, f64)>,
    stop: Arc<AtomicBool>,
    t0: Instant,
) -> Result<()> {
    let draw_err = |e: std::io::Error| Error::io("dashboard", format!("cannot draw: {e}"));
    let mut state = State::new(stop);
    let mut keys = true;
    let mut dirty = true;
    let mut ended = false;
    let mut last_draw: Option<Instant> = None;
    loop {
        while !ended {
            match rx.try_recv() {
                Ok((event, at)) => {
                    state.apply(event, at);
                    dirty = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => ended = true,
            }
        }
        // Without a summary to show (or keys to dismiss it), an ended channel closes at once.
        if ended && (state.summary.is_none() || !keys) {
            return Ok(());
        }
        let since = last_draw.map_or(Duration::MAX, |t| t.elapsed());
        if (dirty && since >= FRAME) || since >= Duration::from_secs(1) {
            state.tick(t0.elapsed().as_secs_f64());
            term.draw(|f| draw(f, &state)).map_err(draw_err)?;
            last_draw = Some(Instant::now());
            dirty = false;
        }
        if !keys {
            std::thread::sleep(POLL);
            continue;
        }
        // A terminal that cannot be read leaves the dashboard without keys, still drawing.
        match term::poll(POLL) {
            Ok(true) => match term::read() {
                Ok(term::Event::Key(key)) => {
                    if on_key(&mut state, key) == KeyResult::Close {
                        return Ok(());
                    }
                    dirty = true;
                }
                Ok(term::Event::Resize(..)) => dirty = true,
                Ok(_) => {}
                Err(_) => keys = false,
            },
            Ok(false) => {}
            Err(_) => keys = false,
        }
    }
}

/// An owned copy of an [`Event`], sent to the drawing thread.
#[derive(Clone, Debug, PartialEq)]
enum OwnedEvent {
    /// [`Event::Start`].
    Start(RunInfo),
    /// [`Event::Batch`].
    Batch {
        epoch: usize,
        done: usize,
        of: usize,
        step: u64,
    },
    /// [`Event::Step`].
    Step(StepLine),
    /// [`Event::Eval`].
    Eval(EvalLine),
    /// [`Event::Epoch`].
    Epoch(EpochLine),
    /// [`Event::Checkpoint`].
    Checkpoint(PathBuf),
    /// [`Event::Finish`].
    Finish(Summary),
}

impl From<&Event<'_>> for OwnedEvent {
    fn from(event: &Event<'_>) -> Self {
        match event {
            Event::Start(i) => OwnedEvent::Start((*i).clone()),
            Event::Batch {
                epoch,
                done,
                of,
                step,
            } => OwnedEvent::Batch {
                epoch: *epoch,
                done: *done,
                of: *of,
                step: *step,
            },
            Event::Step(l) => OwnedEvent::Step((*l).clone()),
            Event::Eval(l) => OwnedEvent::Eval((*l).clone()),
            Event::Epoch(l) => OwnedEvent::Epoch((*l).clone()),
            Event::Checkpoint(p) => OwnedEvent::Checkpoint(p.to_path_buf()),
            Event::Finish(s) => OwnedEvent::Finish((*s).clone()),
        }
    }
}

/// What the dashboard knows of the run and where the user looks: all [`draw`] reads.
struct State {
    /// The run's stop flag.
    stop: Arc<AtomicBool>,
    info: Option<RunInfo>,
    /// Latest epoch seen (1-based; 0 before the first batch).
    epoch: usize,
    /// Optimizer steps done.
    step: u64,
    /// Batches done in the current epoch and batches per epoch.
    batch: Option<(usize, usize)>,
    steps: Vec<StepLine>,
    evals: Vec<EvalLine>,
    epochs: Vec<EpochLine>,
    checkpoint: Option<PathBuf>,
    summary: Option<Summary>,
    /// `(seconds, step)` of the recent events, for the steps per second.
    recent: VecDeque<(f64, u64)>,
    /// Seconds since the dashboard started.
    now: f64,
    started_at: Option<f64>,
    finished_at: Option<f64>,
    /// Selected step line; `None` follows the latest.
    cursor: Option<usize>,
    /// Epoch rows hidden below the table's view (0 shows the latest).
    table_scroll: usize,
    /// A stop was asked for.
    stopping: bool,
}

impl State {
    fn new(stop: Arc<AtomicBool>) -> Self {
        State {
            stop,
            info: None,
            epoch: 0,
            step: 0,
            batch: None,
            steps: Vec::new(),
            evals: Vec::new(),
            epochs: Vec::new(),
            checkpoint: None,
            summary: None,
            recent: VecDeque::new(),
            now: 0.0,
            started_at: None,
            finished_at: None,
            cursor: None,
            table_scroll: 0,
            stopping: false,
        }
    }

    /// Moves the clock to `now` seconds (never back).
    fn tick(&mut self, now: f64) {
        self.now = self.now.max(now);
    }

    /// Takes in an event that happened `at` seconds after the dashboard started.
    fn apply(&mut self, event: OwnedEvent, at: f64) {
        self.tick(at);
        match event {
            OwnedEvent::Start(info) => {
                self.step = info.start_step;
                self.started_at = Some(at);
                self.recent.clear();
                self.note_step(at, info.start_step);
                self.info = Some(info);
            }
            OwnedEvent::Batch {
                epoch,
                done,
                of,
                step,
            } => {
                self.epoch = epoch;
                self.batch = Some((done, of));
                self.note_step(at, step);
            }
            OwnedEvent::Step(l) => {
                self.epoch = self.epoch.max(l.epoch);
                self.note_step(at, l.step);
                self.steps.push(l);
            }
            OwnedEvent::Eval(l) => {
                self.epoch = self.epoch.max(l.epoch);
                self.evals.push(l);
            }
            OwnedEvent::Epoch(l) => {
                self.epoch = self.epoch.max(l.epoch);
                self.epochs.push(l);
                if self.table_scroll > 0 {
                    // Keep the rows in view where they were.
                    self.table_scroll += 1;
                }
            }
            OwnedEvent::Checkpoint(p) => self.checkpoint = Some(p),
            OwnedEvent::Finish(s) => {
                self.step = self.step.max(s.steps);
                if s.checkpoint.is_some() {
                    self.checkpoint.clone_from(&s.checkpoint);
                }
                self.finished_at = Some(at);
                self.summary = Some(s);
            }
        }
    }

    fn note_step(&mut self, at: f64, step: u64) {
        self.step = self.step.max(step);
        if self.recent.back().is_some_and(|&(_, s)| s == step) {
            return;
        }
        self.recent.push_back((at, step));
        while self.recent.len() > 2 && self.recent[0].0 < at - RATE_WINDOW_SECS {
            self.recent.pop_front();
        }
    }

    /// Optimizer steps per second over the recent events, else from the last step line's
    /// step time.
    fn steps_per_sec(&self) -> Option<f64> {
        if let (Some(&(t0, s0)), Some(&(t1, s1))) = (self.recent.front(), self.recent.back())
            && t1 > t0
            && s1 > s0
        {
            return Some((s1 - s0) as f64 / (t1 - t0));
        }
        self.steps
            .last()
            .filter(|l| l.step_ms > 0.0)
            .map(|l| 1000.0 / l.step_ms)
    }

    /// Seconds left at the recent pace.
    fn eta(&self) -> Option<f64> {
        let info = self.info.as_ref()?;
        let left = info.total_steps.saturating_sub(self.step);
        self.steps_per_sec().map(|r| left as f64 / r)
    }

    fn elapsed(&self) -> f64 {
        let start = self.started_at.unwrap_or(0.0);
        self.finished_at.unwrap_or(self.now) - start
    }

    /// The step line the panel shows: the selected one, else the latest.
    fn shown(&self) -> Option<&StepLine> {
        match self.cursor {
            Some(i) => self.steps.get(i),
            None => self.steps.last(),
        }
    }
}

/// What a key leaves the dashboard to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyResult {
    /// Keep showing.
    Stay,
    /// Close the dashboard (restoring the terminal).
    Close,
}

/// Handles one key (see the [module docs](self)).
fn on_key(state: &mut State, key: KeyEvent) -> KeyResult {
    if key.kind == KeyEventKind::Release {
        return KeyResult::Stay;
    }
    if state.summary.is_some() {
        return KeyResult::Close;
    }
    let ctrl_c = key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
    let last = state.steps.len().checked_sub(1);
    match key.code {
        _ if ctrl_c || matches!(key.code, KeyCode::Char('q' | 'Q')) => {
            if state.stopping {
                return KeyResult::Close;
            }
            state.stopping = true;
            state.stop.store(true, Ordering::SeqCst);
        }
        KeyCode::Left => {
            state.cursor = match (state.cursor, last) {
                (Some(i), _) => Some(i.saturating_sub(1)),
                (None, Some(last)) => Some(last.saturating_sub(1)),
                (None, None) => None,
            }
        }
        KeyCode::Right => {
            if let (Some(i), Some(last)) = (state.cursor, last) {
                state.cursor = Some((i + 1).min(last));
            }
        }
        KeyCode::Home => state.cursor = last.map(|_| 0),
        KeyCode::End => state.cursor = None,
        KeyCode::Up => {
            state.table_scroll = (state.table_scroll + 1).min(state.epochs.len().saturating_sub(1));
        }
        KeyCode::Down => state.table_scroll = state.table_scroll.saturating_sub(1),
        _ => {}
    }
    KeyResult::Stay
}

/// `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `42s`, `3m07s`, `2h05m`.
fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "?".into();
    }
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// A figure in 4 decimals, or in scientific notation when very small or large.
fn figure(v: f64) -> String {
    if v != 0.0 && (v.abs() < 1e-3 || v.abs() >= 1e6) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

fn outcome_text(o: Outcome) -> &'static str {
    match o {
        Outcome::Finished => "finished",
        Outcome::Stopped => "stopped",
        Outcome::EarlyStopped => "stopped early (no improvement)",
    }
}

const SERIES_COLORS: [Color; 6] = [
    Color::Cyan,
    Color::LightRed,
    Color::Green,
    Color::Magenta,
    Color::Blue,
    Color::LightYellow,
];

/// Draws the whole dashboard from `state`.
fn draw(frame: &mut Frame, state: &State) {
    let area = frame.area();
    if area.width < 40 || area.height < 16 {
        let text = format!(
            "terminal too small for the dashboard ({}x{}, needs 40x16)",
            area.width, area.height
        );
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let [header, gauge, charts, bottom, footer] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(1),
        Constraint::Min(8),
        Constraint::Length(9),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_header(frame, state, header);
    draw_gauge(frame, state, gauge);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(charts);
    draw_loss_chart(frame, state, left);
    draw_metric_chart(frame, state, right);
    let [panel, table] =
        Layout::horizontal([Constraint::Length(34), Constraint::Min(20)]).areas(bottom);
    draw_panel(frame, state, panel);
    draw_epochs(frame, state, table);
    draw_footer(frame, state, footer);
    if state.summary.is_some() {
        draw_summary(frame, state, area);
    }
}

fn draw_header(frame: &mut Frame, state: &State, area: Rect) {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let lines = match &state.info {
        None => vec![
            Line::from(Span::styled("kiln training", bold)),
            Line::from("waiting for the run to start…"),
        ],
        Some(info) => {
            let rate = state.steps_per_sec();
            let eta = if state.summary.is_some() {
                "done".to_string()
            } else {
                state.eta().map_or("?".into(), duration)
            };
            vec![
                Line::from(vec![
                    Span::styled("kiln training", bold),
                    Span::raw(format!(
                        "  on {}  ·  {} parameters{}",
                        info.device,
                        thousands(info.params as u64),
                        state.checkpoint.as_ref().map_or(String::new(), |c| {
                            let name = c.file_name().map_or_else(
                                || c.display().to_string(),
                                |n| n.to_string_lossy().into_owned(),
                            );
                            format!("  ·  checkpoint {name}")
                        })
                    )),
                ]),
                Line::from(vec![
                    Span::styled(format!("epoch {}/{}", state.epoch, info.epochs), bold),
                    Span::raw("  ·  "),
                    Span::styled(
                        format!(
                            "step {}/{}",
                            thousands(state.step),
                            thousands(info.total_steps)
                        ),
                        bold,
                    ),
                    Span::raw(format!(
                        "  ·  {} steps/s  ·  ETA {eta}  ·  elapsed {}",
                        rate.map_or("?".into(), |r| format!("{r:.1}")),
                        duration(state.elapsed())
                    )),
                ]),
            ]
        }
    };
    frame.render_widget(Paragraph::new(lines), area);
}

fn draw_gauge(frame: &mut Frame, state: &State, area: Rect) {
    let (done, of) = state.batch.unwrap_or((0, 0));
    let ratio = if of > 0 {
        (done as f64 / of as f64).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let label = if of > 0 {
        format!(
            "epoch {} · batch {done}/{of} ({:.0}%)",
            state.epoch,
            ratio * 100.0
        )
    } else {
        "no batch yet".into()
    };
    frame.render_widget(
        Gauge::default()
            .ratio(ratio)
            .label(label)
            .gauge_style(Style::new().fg(Color::Green).bg(Color::DarkGray)),
        area,
    );
}

/// A named series of `(step, value)` points.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    /// Points (evaluations) rather than a dense curve.
    sparse: bool,
}

/// Draws `series` against the step, with the selected step marked.
fn draw_chart(
    frame: &mut Frame,
    state: &State,
    area: Rect,
    title: &str,
    legend: LegendPosition,
    series: &[Series],
) {
    let finite = || {
        series
            .iter()
            .flat_map(|s| &s.points)
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    };
    let block = Block::bordered().title(title.to_string());
    if finite().next().is_none() {
        frame.render_widget(
            Paragraph::new("no figures yet").block(block).centered(),
            area,
        );
        return;
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in finite() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = if y1 > y0 {
        (y1 - y0) * 0.05
    } else {
        (y0.abs() * 0.1).max(1e-3)
    };
    // Figures that cannot be negative (losses, accuracies) keep the axis at 0 or above.
    let (y0, y1) = (
        if y0 >= 0.0 {
            (y0 - pad).max(0.0)
        } else {
            y0 - pad
        },
        y1 + pad,
    );
    let marker = state
        .cursor
        .and_then(|i| state.steps.get(i))
        .map(|l| vec![(l.step as f64, y0), (l.step as f64, y1)]);
    let mut datasets: Vec<Dataset> = series
        .iter()
        .zip(SERIES_COLORS.iter().cycle())
        .map(|(s, &color)| {
            Dataset::default()
                .name(s.name.clone())
                .marker(if s.sparse {
                    Marker::Dot
                } else {
                    Marker::Braille
                })
                .graph_type(GraphType::Line)
                .style(Style::new().fg(color))
                .data(&s.points)
        })
        .collect();
    if let Some(m) = &marker {
        datasets.push(
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(Color::Yellow))
                .data(m),
        );
    }
    let axis_style = Style::new().fg(Color::Gray);
    let chart = Chart::new(datasets)
        .block(block)
        .x_axis(
            Axis::default()
                .style(axis_style)
                .bounds([x0, x1])
                .labels([format!("{x0:.0}"), format!("{x1:.0}")]),
        )
        .y_axis(
            Axis::default()
                .style(axis_style)
                .bounds([y0, y1])
                .labels([figure(y0), figure(y1)]),
        )
        .legend_position(Some(legend))
        .hidden_legend_constraints((Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)));
    frame.render_widget(chart, area);
}

fn finite_points(points: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    points
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect()
}

fn valid_name(state: &State) -> &str {
    state
        .info
        .as_ref()
        .map_or("valid", |i| i.valid_name.as_str())
}

fn draw_loss_chart(frame: &mut Frame, state: &State, area: Rect) {
    let valid = valid_name(state);
    let valid_loss = format!("{valid}_loss");
    let series = [
        Series {
            name: "train loss".into(),
            points: finite_points(
                state
                    .steps
                    .iter()
                    .filter_map(|l| Some((l.step as f64, *l.metrics.get("loss")?))),
            ),
            sparse: false,
        },
        Series {
            name: format!("{valid} loss"),
            points: finite_points(
                state
                    .evals
                    .iter()
                    .filter_map(|l| Some((l.step as f64, *l.metrics.get(&valid_loss)?))),
            ),
            sparse: true,
        },
    ];
    let series: Vec<Series> = series
        .into_iter()
        .filter(|s| !s.points.is_empty())
        .collect();
    draw_chart(
        frame,
        state,
        area,
        " loss ",
        LegendPosition::TopRight,
        &series,
    );
}

fn draw_metric_chart(frame: &mut Frame, state: &State, area: Rect) {
    let valid = valid_name(state);
    let prefix = format!("{valid}_");
    let mut by_name: BTreeMap<String, Series> = BTreeMap::new();
    for l in &state.steps {
        for (k, v) in l.metrics.iter().filter(|(k, _)| *k != "loss") {
            by_name
                .entry(format!("0 {k}"))
                .or_insert_with(|| Series {
                    name: format!("train {k}"),
                    points: Vec::new(),
                    sparse: false,
                })
                .points
                .push((l.step as f64, *v));
        }
    }
    for l in &state.evals {
        for (k, v) in &l.metrics {
            let short = k.strip_prefix(&prefix).unwrap_or(k);
            if short == "loss" {
                continue;
            }
            by_name
                .entry(format!("1 {short}"))
                .or_insert_with(|| Series {
                    name: format!("{valid} {short}"),
                    points: Vec::new(),
                    sparse: true,
                })
                .points
                .push((l.step as f64, *v));
        }
    }
    let mut series: Vec<Series> = by_name
        .into_values()
        .map(|mut s| {
            s.points = finite_points(s.points.into_iter());
            s
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let (title, legend) = if series.is_empty() {
        series.push(Series {
            name: "lr".into(),
            points: finite_points(state.steps.iter().map(|l| (l.step as f64, l.lr))),
            sparse: false,
        });
        (" learning rate ", LegendPosition::TopRight)
    } else {
        // Accuracies rise to the top right.
        (" metrics ", LegendPosition::BottomRight)
    };
    draw_chart(frame, state, area, title, legend, &series);
}

fn draw_panel(frame: &mut Frame, state: &State, area: Rect) {
    let title = match state.cursor {
        Some(i) => format!(" step line {}/{} (End: live) ", i + 1, state.steps.len()),
        None => " live ".into(),
    };
    let key = |k: &str| Span::styled(format!("{k:<11}"), Style::new().fg(Color::Gray));
    let mut lines = Vec::new();
    match state.shown() {
        None => lines.push(Line::from("no step line yet")),
        Some(l) => {
            lines.push(Line::from(vec![
                key("step"),
                Span::raw(format!("{} (epoch {})", thousands(l.step), l.epoch)),
            ]));
            for (k, v) in &l.metrics {
                lines.push(Line::from(vec![
                    key(k),
                    Span::styled(figure(*v), Style::new().add_modifier(Modifier::BOLD)),
                ]));
            }
            lines.push(Line::from(vec![
                key("lr"),
                Span::raw(format!("{:.3e}", l.lr)),
            ]));
            lines.push(Line::from(vec![
                key("samples/s"),
                Span::raw(format!("{:.0}", l.samples_per_sec)),
            ]));
            lines.push(Line::from(vec![
                key("step ms"),
                Span::raw(format!("{:.2}", l.step_ms)),
            ]));
            let mem = l.memory_bytes.map_or("n/a".into(), |b| {
                format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
            });
            lines.push(Line::from(vec![key("memory"), Span::raw(mem)]));
        }
    }
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        area,
    );
}

fn draw_epochs(frame: &mut Frame, state: &State, area: Rect) {
    let names: BTreeSet<&str> = state
        .epochs
        .iter()
        .flat_map(|l| l.metrics.keys().map(String::as_str))
        .collect();
    let mut header = vec!["epoch".to_string()];
    header.extend(names.iter().map(|n| n.to_string()));
    header.push("samples/s".into());
    header.push("seconds".into());
    let widths: Vec<Constraint> = header
        .iter()
        .map(|h| Constraint::Length(h.len().max(7) as u16))
        .collect();
    let visible = area.height.saturating_sub(3) as usize;
    let end = state.epochs.len() - state.table_scroll.min(state.epochs.len());
    let start = end.saturating_sub(visible);
    let rows = state.epochs[start..end].iter().map(|l| {
        let mut cells = vec![l.epoch.to_string()];
        cells.extend(names.iter().map(|n| l.get(n).map_or("—".into(), figure)));
        cells.push(format!("{:.0}", l.samples_per_sec));
        cells.push(format!("{:.1}", l.seconds));
        Row::new(cells)
    });
    let title = if state.epochs.is_empty() {
        " epochs ".to_string()
    } else {
        format!(
            " epochs {}-{} of {} (↑/↓) ",
            start + 1,
            end,
            state.epochs.len()
        )
    };
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .column_spacing(2)
        .block(Block::bordered().title(title));
    frame.render_widget(table, area);
}

fn draw_footer(frame: &mut Frame, state: &State, area: Rect) {
    let line = if state.summary.is_some() {
        Line::from(Span::styled(
            "run ended — press any key",
            Style::new().add_modifier(Modifier::BOLD),
        ))
    } else if state.stopping {
        Line::from(Span::styled(
            "stopping after this step… (q again closes the dashboard)",
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ))
    } else {
        Line::from(Span::styled(
            "←/→ step history  Home/End first/live  ↑/↓ epochs  q stop",
            Style::new().fg(Color::Gray),
        ))
    };
    frame.render_widget(Paragraph::new(line), area);
}

fn draw_summary(frame: &mut Frame, state: &State, area: Rect) {
    let Some(s) = &state.summary else {
        return;
    };
    let mut lines = vec![Line::from(Span::styled(
        format!(
            "{} after {} step{} in {}",
            outcome_text(s.outcome),
            thousands(s.steps),
            if s.steps == 1 { "" } else { "s" },
            duration(s.seconds)
        ),
        Style::new().add_modifier(Modifier::BOLD),
    ))];
    let metrics = |m: &Metrics| {
        m.iter()
            .map(|(k, v)| format!("{k} {}", figure(*v)))
            .collect::<Vec<_>>()
            .join("  ")
    };
    if let Some(e) = &s.last_epoch {
        lines.push(Line::from(format!(
            "epoch {}: {}",
            e.epoch,
            metrics(&e.metrics)
        )));
    }
    if let Some(e) = &s.last_eval {
        lines.push(Line::from(format!(
            "last evaluation (step {}): {}",
            e.step,
            metrics(&e.metrics)
        )));
    }
    if let Some(c) = &s.checkpoint {
        lines.push(Line::from(format!("checkpoint {}", c.display())));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        "press any key",
        Style::new().fg(Color::Yellow),
    )));
    let popup = area.centered(
        Constraint::Length(area.width.saturating_sub(8).min(90)),
        // Room for a wrapped line or two.
        Constraint::Length(lines.len() as u16 + 4),
    );
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title(" run summary ")),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use std::path::Path;

    fn metrics(pairs: &[(&str, f64)]) -> Metrics {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn info() -> RunInfo {
        RunInfo {
            device: "testdev-7".into(),
            params: 1_234_567,
            epochs: 3,
            batches_per_epoch: 4,
            steps_per_epoch: 4,
            total_steps: 12,
            start_step: 0,
            valid_name: "test".into(),
        }
    }

    fn step_line(step: u64, epoch: usize, loss: f64, acc: Option<f64>) -> StepLine {
        let mut m = metrics(&[("loss", loss)]);
        if let Some(a) = acc {
            m.insert("acc".into(), a);
        }
        StepLine {
            step,
            epoch,
            metrics: m,
            lr: 1e-3,
            samples_per_sec: 5210.0,
            step_ms: 12.5,
            memory_bytes: Some(3 * 1024 * 1024),
        }
    }

    /// Epoch 1 (4 steps, an evaluation, an epoch line) and half of epoch 2, one second per
    /// step; `acc` adds accuracies.
    fn fed(acc: bool) -> State {
        let mut s = State::new(Arc::new(AtomicBool::new(false)));
        let info = info();
        let mut t = 0.0;
        let mut feed = |s: &mut State, e: Event<'_>| {
            s.apply(OwnedEvent::from(&e), t);
            t += 0.5;
        };
        feed(&mut s, Event::Start(&info));
        for step in 1..=6u64 {
            let epoch = if step <= 4 { 1 } else { 2 };
            let done = ((step - 1) % 4 + 1) as usize;
            feed(
                &mut s,
                Event::Batch {
                    epoch,
                    done,
                    of: 4,
                    step,
                },
            );
            let loss = 1.0 / (1 << step) as f64 * 10.0;
            let line = step_line(step, epoch, loss, acc.then_some(0.5 + step as f64 / 20.0));
            feed(&mut s, Event::Step(&line));
            if step == 4 {
                let mut m = metrics(&[("test_loss", 0.75)]);
                if acc {
                    m.insert("test_acc".into(), 0.8125);
                }
                let eval = EvalLine {
                    step,
                    epoch: 1,
                    metrics: m,
                    sample: None,
                };
                feed(&mut s, Event::Eval(&eval));
                let mut m = metrics(&[("train_loss", 0.4375), ("test_loss", 0.75)]);
                if acc {
                    m.insert("test_acc".into(), 0.8125);
                }
                let epoch_line = EpochLine {
                    epoch: 1,
                    metrics: m,
                    samples_per_sec: 4321.0,
                    seconds: 4.5,
                };
                feed(&mut s, Event::Epoch(&epoch_line));
                feed(
                    &mut s,
                    Event::Checkpoint(Path::new("ckpt/step-4.safetensors")),
                );
            }
        }
        s
    }

    fn render(state: &State, w: u16, h: u16) -> Vec<String> {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, state)).unwrap();
        let buf = term.backend().buffer();
        buf.content()
            .chunks(w as usize)
            .map(|row| row.iter().map(|c| c.symbol()).collect())
            .collect()
    }

    fn has(screen: &[String], text: &str) -> bool {
        screen.iter().any(|l| l.contains(text))
    }

    #[test]
    fn renders_the_run_from_its_events() {
        let state = fed(true);
        let screen = render(&state, 100, 30);
        let all = screen.join("\n");
        assert!(has(&screen, "testdev-7"), "{all}");
        assert!(has(&screen, "1,234,567 parameters"), "{all}");
        assert!(has(&screen, "epoch 2/3"), "{all}");
        assert!(has(&screen, "step 6/12"), "{all}");
        assert!(has(&screen, "batch 2/4 (50%)"), "{all}");
        // Latest step line: loss 10/64, acc 0.8, 3 MiB.
        assert!(has(&screen, "0.1562"), "{all}");
        assert!(has(&screen, "0.8000"), "{all}");
        assert!(has(&screen, "3.0 MiB"), "{all}");
        assert!(has(&screen, "step-4.safetensors"), "{all}");
        // The epoch table's row, with its header.
        assert!(has(&screen, "train_loss"), "{all}");
        assert!(
            screen
                .iter()
                .any(|l| l.contains("0.4375") && l.contains("0.8125") && l.contains("4321")),
            "{all}"
        );
        assert!(has(&screen, " metrics "), "{all}");
        assert!(has(&screen, "test acc"), "{all}");
        assert!(has(&screen, "train loss"), "{all}");
        // 6 steps in 11 half-seconds... of which the recent window: a finite ETA.
        assert!(has(&screen, "ETA "), "{all}");
        assert!(!has(&screen, "ETA ?"), "{all}");
    }

    #[test]
    fn without_other_metrics_it_charts_the_learning_rate() {
        let screen = render(&fed(false), 100, 30);
        assert!(has(&screen, " learning rate "), "{}", screen.join("\n"));
        assert!(!has(&screen, " metrics "));
    }

    #[test]
    fn eta_comes_from_the_recent_pace() {
        let s = fed(true);
        // Steps 0..6 over the 7 s from the start to the last step's batch.
        let rate = s.steps_per_sec().unwrap();
        assert!((rate - 6.0 / 7.0).abs() < 1e-9, "{rate}");
        assert!((s.eta().unwrap() - 6.0 / rate).abs() < 1e-9);
        assert_eq!(duration(42.4), "42s");
        assert_eq!(duration(187.0), "3m07s");
        assert_eq!(duration(7500.0), "2h05m");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn keys_move_the_cursor_and_stop_the_run() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut s = fed(true);
        s.stop = stop.clone();
        let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
        assert_eq!(s.cursor, None);
        assert_eq!(on_key(&mut s, key(KeyCode::Left)), KeyResult::Stay);
        assert_eq!(s.cursor, Some(4));
        on_key(&mut s, key(KeyCode::Left));
        assert_eq!(s.cursor, Some(3));
        assert_eq!(s.shown().unwrap().step, 4);
        let screen = render(&s, 100, 30);
        assert!(has(&screen, "step line 4/6"), "{}", screen.join("\n"));
        on_key(&mut s, key(KeyCode::Right));
        assert_eq!(s.cursor, Some(4));
        on_key(&mut s, key(KeyCode::Home));
        assert_eq!(s.cursor, Some(0));
        on_key(&mut s, key(KeyCode::Left));
        assert_eq!(s.cursor, Some(0));
        on_key(&mut s, key(KeyCode::End));
        assert_eq!(s.cursor, None);
        assert_eq!(s.shown().unwrap().step, 6);
        on_key(&mut s, key(KeyCode::Up));
        assert_eq!(s.table_scroll, 0, "one epoch line: nothing to scroll");

        assert!(!stop.load(Ordering::SeqCst));
        assert_eq!(on_key(&mut s, key(KeyCode::Char('q'))), KeyResult::Stay);
        assert!(stop.load(Ordering::SeqCst));
        let screen = render(&s, 100, 30);
        assert!(
            has(&screen, "stopping after this step…"),
            "{}",
            screen.join("\n")
        );
        // Asked twice: close.
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(on_key(&mut s, ctrl_c), KeyResult::Close);

        // Ctrl-C alone stops too.
        let stop = Arc::new(AtomicBool::new(false));
        let mut s = State::new(stop.clone());
        assert_eq!(on_key(&mut s, ctrl_c), KeyResult::Stay);
        assert!(stop.load(Ordering::SeqCst));
    }

    #[test]
    fn the_summary_waits_for_any_key() {
        let mut s = fed(true);
        let summary = Summary {
            outcome: Outcome::Stopped,
            steps: 6,
            seconds: 7.0,
            last_epoch: s.epochs.last().cloned(),
            last_eval: s.evals.last().cloned(),
            checkpoint: Some(PathBuf::from("ckpt/step-6.safetensors")),
        };
        s.apply(OwnedEvent::from(&Event::Finish(&summary)), 7.0);
        let screen = render(&s, 100, 30);
        let all = screen.join("\n");
        assert!(has(&screen, "stopped after 6 steps in 7s"), "{all}");
        assert!(has(&screen, "press any key"), "{all}");
        assert!(has(&screen, "ETA done"), "{all}");
        let key = KeyEvent::new(KeyCode::Char('x'), KeyModifiers::NONE);
        assert_eq!(on_key(&mut s, key), KeyResult::Close);
    }

    #[test]
    fn draws_any_size_and_no_run_yet() {
        let empty = State::new(Arc::new(AtomicBool::new(false)));
        assert!(has(
            &render(&empty, 100, 30),
            "waiting for the run to start"
        ));
        let full = fed(true);
        for (w, h) in [(1, 1), (39, 15), (40, 16), (60, 20), (200, 60)] {
            render(&empty, w, h);
            render(&full, w, h);
        }
        assert!(has(&render(&full, 30, 10), "terminal too small"));
    }

    #[test]
    fn the_epoch_table_scrolls() {
        let mut s = State::new(Arc::new(AtomicBool::new(false)));
        s.apply(OwnedEvent::Start(info()), 0.0);
        for epoch in 1..=12 {
            s.apply(
                OwnedEvent::Epoch(EpochLine {
                    epoch,
                    metrics: metrics(&[("train_loss", epoch as f64 / 100.0)]),
                    samples_per_sec: 1000.0 + epoch as f64,
                    seconds: 1.0,
                }),
                epoch as f64,
            );
        }
        let screen = render(&s, 100, 30);
        assert!(has(&screen, "1012"), "{}", screen.join("\n"));
        assert!(!has(&screen, "1001"));
        let up = KeyEvent::new(KeyCode::Up, KeyModifiers::NONE);
        for _ in 0..20 {
            on_key(&mut s, up);
        }
        assert_eq!(s.table_scroll, 11);
        let screen = render(&s, 100, 30);
        assert!(has(&screen, "1001"), "{}", screen.join("\n"));
        assert!(!has(&screen, "1012"));
    }

    #[test]
    fn a_failed_drawing_thread_stops_the_run_with_its_message() {
        let (tx, rx) = mpsc::channel::<(OwnedEvent, f64)>();
        let ui = std::thread::spawn(move || -> Result<()> {
            drop(rx);
            panic!("boom at frame 3");
        });
        while !ui.is_finished() {
            std::thread::yield_now();
        }
        let mut d = Dashboard {
            tx: Some(tx),
            ui: Some(ui),
            t0: Instant::now(),
        };
        let info = info();
        let e = d.report(&Event::Start(&info)).unwrap_err().to_string();
        assert!(
            e.contains("drawing thread panicked: boom at frame 3"),
            "{e}"
        );
        // Then it is silent, and dropping it does not wait.
        d.report(&Event::Start(&info)).unwrap();
        d.wait().unwrap();

        // A thread that ended on a key (Ok) leaves training going.
        let (tx, rx) = mpsc::channel::<(OwnedEvent, f64)>();
        let ui = std::thread::spawn(move || -> Result<()> {
            drop(rx);
            Ok(())
        });
        let mut d = Dashboard {
            tx: Some(tx),
            ui: Some(ui),
            t0: Instant::now(),
        };
        while d.ui.as_ref().is_some_and(|u| !u.is_finished()) {
            std::thread::yield_now();
        }
        d.report(&Event::Start(&info)).unwrap();
    }

    #[test]
    fn needs_a_terminal() {
        if std::io::stdout().is_terminal() {
            return;
        }
        let e = Dashboard::new(Arc::new(AtomicBool::new(false)))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("needs a terminal"), "{e}");
    }
}
