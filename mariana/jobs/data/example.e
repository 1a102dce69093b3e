# mariana example graph: train connections between European cities, weight = hours.
# Directed edges "src dst weight"; pagerank and sssp read them as directed, wcc as undirected.
# The islands at the bottom form a second component; "valletta" has no way out (dangling).
amsterdam  brussels   1.9
amsterdam  cologne    2.7
amsterdam  berlin     6.1
brussels   amsterdam  1.9
brussels   paris      1.4
brussels   cologne    1.8
cologne    frankfurt  1.1
cologne    brussels   1.8
cologne    berlin     4.3
paris      london     2.3
paris      lyon       2.0
paris      brussels   1.4
london     paris      2.3
london     edinburgh  4.4
edinburgh  london     4.4
lyon       milan      6.7
lyon       paris      2.0
milan      zurich     3.3
milan      rome       2.9
zurich     frankfurt  3.9
zurich     milan      3.3
frankfurt  berlin     4.0
frankfurt  munich     3.2
frankfurt  zurich     3.9
munich     vienna     4.0
munich     zurich     3.5
berlin     prague     4.3
prague     vienna     4.0
vienna     budapest   2.6
budapest   vienna     2.6
rome       naples     1.2
naples     palermo    9.5
palermo    valletta   5.0   # ferry; valletta is dangling
# a second component
reykjavik  akureyri   5.0
akureyri   husavik    1.0
husavik    reykjavik  6.0
