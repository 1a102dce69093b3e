# 60 vertices n0..n59: a random directed graph with a dangling vertex, self-loops, parallel edges
# and a second component (n50..n59)
n20 n9 7
n41 n3 2
n34 n6 6
n37 n3 9
n13 n2 2
n27 n26 2
n15 n5 9
n27 n3 2
n14 n40 1
n36 n37 7
n3 n14 1
n35 n8 5
n26 n9 9
n7 n36 5
n35 n43 3
n6 n37 4
n23 n6 9
n45 n4 1
n39 n13 8
n43 n34 7
n49 n20 8
n37 n29 6
n19 n15 3
n44 n49 4
n5 n36 5
n33 n31 6
n46 n28 5
n38 n4 2
n32 n26 3
n48 n21 3
n31 n26 1
n42 n4 9
n36 n20 6
n44 n22 8
n37 n29 2
n5 n17 8
n44 n42 2
n3 n46 5
n41 n36 8
n18 n45 7
n42 n22 1
n29 n22 3
n39 n7 8
n3 n13 5
n8 n47 4
n25 n25 8
n5 n10 8
n25 n35 5
n8 n27 9
n17 n45 7
n22 n43 7
n14 n9 2
n11 n9 4
n42 n14 1
n31 n37 3
n16 n18 1
n9 n26 9
n23 n39 6
n8 n44 9
n39 n41 1
n29 n49 9
n25 n25 7
n25 n6 8
n40 n25 1
n12 n4 4
n28 n10 2
n21 n38 1
n6 n0 3
n34 n6 6
n39 n1 2
n13 n39 7
n9 n40 5
n22 n38 6
n30 n7 2
n31 n29 8
n30 n19 2
n9 n6 6
n47 n16 8
n44 n10 9
n1 n13 9
n23 n9 9
n1 n48 9
n19 n41 2
n44 n16 9
n23 n10 6
n49 n14 9
n34 n49 9
n21 n40 4
n39 n48 4
n15 n25 4
n12 n33 8
n22 n46 1
n1 n17 8
n16 n12 6
n28 n46 6
n23 n5 4
n6 n14 8
n12 n21 4
n30 n39 1
n30 n41 6
n41 n5 2
n24 n45 4
n30 n11 7
n40 n21 2
n46 n25 8
n25 n47 2
n46 n10 3
n8 n1 3
n37 n29 3
n39 n38 8
n42 n22 3
n35 n35 3
n1 n0 2
n33 n47 3
n27 n12 4
n1 n16 4
n18 n32 4
n48 n37 6
n16 n34 7
n8 n3 6
n29 n42 9
n26 n32 3
n34 n9 9
n32 n1 8
n49 n11 1
n49 n9 3
n9 n30 2
n35 n3 6
n43 n33 9
n35 n30 2
n35 n3 4
n12 n17 1
n49 n6 9
n28 n35 1
n48 n4 8
n20 n39 9
n38 n32 4
n44 n17 8
n32 n34 8
n32 n15 9
n16 n35 4
n28 n8 7
n7 n25 8
n20 n4 4
n27 n4 4
n42 n19 2
n49 n9 6
n9 n16 3
n29 n14 2
n25 n31 3
n42 n14 3
n45 n27 9
n25 n21 7
n12 n22 6
n5 n46 6
n1 n21 9
n29 n28 1
n24 n21 9
n39 n18 9
n4 n7 4
n6 n5 5
n17 n2 3
n17 n48 3
n27 n43 5
n25 n9 9
n32 n36 8
n44 n20 2
n17 n3 3
n27 n4 5
n1 n40 2
n16 n5 4
n4 n16 2
n29 n0 6
n35 n26 5
n39 n8 1
n33 n45 4
n7 n10 5
n3 n11 4
n19 n40 5
n33 n48 4
n54 n57
n58 n52
n54 n55
n50 n54
n50 n50
n50 n58
n58 n53
n58 n57
n53 n57
n51 n56
n57 n58
n56 n58
n54 n53
n53 n55
n53 n52
n56 n55
n50 n52
n50 n51
n54 n56
n52 n50
n1 n1 2
n2 n3 1
n2 n3 4
n48 n49 1
