//! What routers return, and path maps.

use std::fmt;

use crate::update::Send;

/// One destination chosen by a router: a node name, a path-map key, or
/// [`END`](crate::END); or a dynamic task.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// A node name, a path-map key, or `__end__`.
    Node(String),
    /// Run a node with a private payload.
    Send(Send),
}

impl Route {
    /// A route to `node` (or a path-map key, or [`END`](crate::END)).
    pub fn to(node: impl Into<String>) -> Self {
        Route::Node(node.into())
    }

    /// A dynamic task: run `node` with `payload` as its input.
    pub fn send(node: impl Into<String>, payload: impl serde::Serialize) -> Self {
        Route::Send(Send::new(node, payload))
    }
}

impl From<&str> for Route {
    fn from(node: &str) -> Self {
        Route::Node(node.to_owned())
    }
}

impl From<String> for Route {
    fn from(node: String) -> Self {
        Route::Node(node)
    }
}

impl From<&String> for Route {
    fn from(node: &String) -> Self {
        Route::Node(node.clone())
    }
}

impl From<Send> for Route {
    fn from(send: Send) -> Self {
        Route::Send(send)
    }
}

/// Types a router may return: anything that converts into a [`Route`]
/// (`&str`, `String`, [`Send`], [`Route`], or your own enum with a
/// `From<YourEnum> for Route`), a `Vec` or array of those, an `Option`
/// (`None` routes nowhere), or a `Result` whose error is
/// [`Display`](fmt::Display) (a router failure).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a router result",
    label = "a router must return a route (`&str`, `String`, `Send`, `Route`), a Vec/array/Option of them, or a Result",
    note = "for your own type, implement `From<{Self}> for sandgraph_sdk::Route`"
)]
pub trait IntoRoutes {
    /// The routes, or the router's failure message.
    fn into_routes(self) -> Result<Vec<Route>, String>;
}

impl<T: Into<Route>> IntoRoutes for T {
    fn into_routes(self) -> Result<Vec<Route>, String> {
        Ok(vec![self.into()])
    }
}

impl<T: Into<Route>> IntoRoutes for Vec<T> {
    fn into_routes(self) -> Result<Vec<Route>, String> {
        Ok(self.into_iter().map(Into::into).collect())
    }
}

impl<T: Into<Route>, const N: usize> IntoRoutes for [T; N] {
    fn into_routes(self) -> Result<Vec<Route>, String> {
        Ok(self.into_iter().map(Into::into).collect())
    }
}

impl<T: IntoRoutes> IntoRoutes for Option<T> {
    fn into_routes(self) -> Result<Vec<Route>, String> {
        self.map_or_else(|| Ok(Vec::new()), IntoRoutes::into_routes)
    }
}

impl<T: IntoRoutes, E: fmt::Display> IntoRoutes for Result<T, E> {
    fn into_routes(self) -> Result<Vec<Route>, String> {
        self.map_err(|err| err.to_string())?.into_routes()
    }
}

/// A conditional edge's path map: router answers (keys) to nodes.
///
/// Pass an array of pairs (`[("continue", "count"), ("done", END)]`), a
/// `Vec` of pairs, or `None`/`[]` when the router answers with node names
/// directly.
pub trait IntoPathMap {
    /// The (key, target) pairs, in order.
    fn into_path_map(self) -> Vec<(String, String)>;
}

impl<const N: usize> IntoPathMap for [(&str, &str); N] {
    fn into_path_map(self) -> Vec<(String, String)> {
        self.iter()
            .map(|&(k, t)| (k.to_owned(), t.to_owned()))
            .collect()
    }
}

impl IntoPathMap for &[(&str, &str)] {
    fn into_path_map(self) -> Vec<(String, String)> {
        self.iter()
            .map(|&(k, t)| (k.to_owned(), t.to_owned()))
            .collect()
    }
}

impl IntoPathMap for Vec<(&str, &str)> {
    fn into_path_map(self) -> Vec<(String, String)> {
        self.as_slice().into_path_map()
    }
}

impl IntoPathMap for Vec<(String, String)> {
    fn into_path_map(self) -> Vec<(String, String)> {
        self
    }
}

/// `None`: no path map.
impl IntoPathMap for Option<Vec<(String, String)>> {
    fn into_path_map(self) -> Vec<(String, String)> {
        self.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn routes(r: impl IntoRoutes) -> Result<Vec<Route>, String> {
        r.into_routes()
    }

    #[test]
    fn conversions() {
        assert_eq!(routes("a"), Ok(vec![Route::to("a")]));
        assert_eq!(routes(String::from("b")), Ok(vec![Route::to("b")]));
        assert_eq!(routes(crate::END), Ok(vec![Route::to("__end__")]));
        assert_eq!(
            routes(vec!["a", "b"]),
            Ok(vec![Route::to("a"), Route::to("b")])
        );
        assert_eq!(
            routes([Route::to("a"), Route::send("w", json!({"x": 1}))]),
            Ok(vec![
                Route::Node("a".into()),
                Route::Send(Send::new("w", json!({"x": 1})))
            ])
        );
        assert_eq!(
            routes((1..=2).map(|x| Send::new("sq", x)).collect::<Vec<_>>()),
            Ok(vec![Route::send("sq", 1), Route::send("sq", 2)])
        );
        assert_eq!(routes(None::<&str>), Ok(vec![]));
        assert_eq!(routes(Some("a")), Ok(vec![Route::to("a")]));
        assert_eq!(routes(Ok::<_, String>("a")), Ok(vec![Route::to("a")]));
        assert_eq!(routes(Err::<&str, _>("nope")), Err("nope".into()));
    }

    #[test]
    fn own_enum_routes() {
        enum Next {
            Again,
            Done,
        }
        impl From<Next> for Route {
            fn from(next: Next) -> Route {
                Route::to(match next {
                    Next::Again => "again",
                    Next::Done => crate::END,
                })
            }
        }
        assert_eq!(routes(Next::Again), Ok(vec![Route::to("again")]));
        assert_eq!(routes([Next::Done]), Ok(vec![Route::to("__end__")]));
    }

    #[test]
    fn path_maps() {
        fn pm(m: impl IntoPathMap) -> Vec<(String, String)> {
            m.into_path_map()
        }
        let pair = |k: &str, t: &str| (k.to_owned(), t.to_owned());
        assert_eq!(
            pm([("continue", "count"), ("done", crate::END)]),
            vec![pair("continue", "count"), pair("done", "__end__")]
        );
        assert_eq!(pm([]), vec![]);
        assert_eq!(pm(None), vec![]);
        assert_eq!(pm(vec![("a", "b")]), vec![pair("a", "b")]);
        assert_eq!(pm(vec![pair("a", "b")]), vec![pair("a", "b")]);
    }
}
