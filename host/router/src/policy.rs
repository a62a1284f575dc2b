//! `[policy]` of `sandgraph.toml` as built-in `pre-execute` listeners: tools
//! an operator denies, and limits on argument values. A violation denies
//! the attempt, so the model hears the reason and may choose again.

use serde::Deserialize;
use serde_json::Value;

use crate::hooks::{Hooks, PreDecision};

/// `[policy]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// Graph tools the model may never run.
    pub deny_tools: Vec<String>,
    /// `[[policy.limit]]`: limits on argument values.
    pub limit: Vec<ArgLimit>,
}

/// One `[[policy.limit]]`: a limit on the argument at `path`. An argument
/// that is absent passes; one of the wrong type for a limit fails it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArgLimit {
    /// The tool it applies to; every tool when absent.
    pub tool: Option<String>,
    /// A JSON pointer into the arguments, e.g. `/topic` or `/items/0`.
    pub path: String,
    /// At most this many characters (strings).
    pub max_length: Option<usize>,
    /// At least this (numbers).
    pub min: Option<f64>,
    /// At most this (numbers).
    pub max: Option<f64>,
    /// The value must be one of these.
    pub allow: Option<Vec<Value>>,
    /// The value must not be one of these.
    pub deny: Vec<Value>,
}

impl PolicyConfig {
    /// Rejects limits that cannot work.
    pub(crate) fn check(&self) -> Result<(), String> {
        for (i, limit) in self.limit.iter().enumerate() {
            let at = format!("limit[{i}]");
            if !(limit.path.is_empty() || limit.path.starts_with('/')) {
                return Err(format!(
                    "{at}: path {:?} is not a JSON pointer (it starts with /)",
                    limit.path
                ));
            }
            if limit.max_length.is_none()
                && limit.min.is_none()
                && limit.max.is_none()
                && limit.allow.is_none()
                && limit.deny.is_empty()
            {
                return Err(format!(
                    "{at}: sets no limit (max_length, min, max, allow or deny)"
                ));
            }
            if let (Some(min), Some(max)) = (limit.min, limit.max)
                && min > max
            {
                return Err(format!("{at}: min {min} is above max {max}"));
            }
        }
        Ok(())
    }

    /// Why `args` of `tool` break the policy, if they do.
    pub fn violation(&self, tool: &str, args: &Value) -> Option<String> {
        if self.deny_tools.iter().any(|t| t == tool) {
            return Some(format!("\"{tool}\" is denied by policy"));
        }
        self.limit
            .iter()
            .filter(|l| l.tool.as_deref().is_none_or(|t| t == tool))
            .find_map(|l| l.violation(args))
    }

    /// Registers the policy as a `pre-execute` listener of `hooks`, after
    /// those already registered (when it has any rule). Install it before
    /// other listeners so the operator's policy decides first.
    pub fn install(&self, hooks: &mut Hooks) {
        if self.deny_tools.is_empty() && self.limit.is_empty() {
            return;
        }
        let policy = self.clone();
        hooks.on_pre_execute(move |exec, next| {
            let violation = policy.violation(&exec.tool, &exec.args);
            async move {
                match violation {
                    Some(reason) => Ok(PreDecision::Deny { reason }),
                    None => next.run().await,
                }
            }
        });
    }
}

/// `3` for 3.0, `2.5` for 2.5.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        v.to_string()
    }
}

impl ArgLimit {
    fn violation(&self, args: &Value) -> Option<String> {
        let value = args.pointer(&self.path)?;
        let at = if self.path.is_empty() {
            "the arguments".to_owned()
        } else {
            format!("argument {}", self.path)
        };
        if let Some(max) = self.max_length {
            match value.as_str() {
                Some(s) if s.chars().count() > max => {
                    return Some(format!("{at} is longer than {max} characters (policy)"));
                }
                Some(_) => {}
                None => return Some(format!("{at} must be a string (policy)")),
            }
        }
        if self.min.is_some() || self.max.is_some() {
            let Some(n) = value.as_f64() else {
                return Some(format!("{at} must be a number (policy)"));
            };
            if let Some(min) = self.min
                && n < min
            {
                return Some(format!(
                    "{at} is below the minimum {} (policy)",
                    number(min)
                ));
            }
            if let Some(max) = self.max
                && n > max
            {
                return Some(format!(
                    "{at} is above the maximum {} (policy)",
                    number(max)
                ));
            }
        }
        if let Some(allow) = &self.allow
            && !allow.contains(value)
        {
            let list = serde_json::to_string(allow).unwrap_or_default();
            return Some(format!("{at} must be one of {list} (policy)"));
        }
        if self.deny.contains(value) {
            return Some(format!("{at} value {value} is denied by policy"));
        }
        None
    }
}
